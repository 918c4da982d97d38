import DBus
import EventLoop

/// A typed client for org.bluez on one bus connection.
///
/// `events()` watches bluetoothd: its name on the bus, its object tree and
/// property changes, as one ordered stream. The call methods map BlueZ's
/// D-Bus API one to one and throw `BlueZError`.
public struct BlueZClient: Sendable {
    public let bus: Bus
    /// Timeout for calls that bluetoothd answers at once.
    public var callTimeout: Duration = .seconds(10)

    public init(bus: Bus) {
        self.bus = bus
    }

    // MARK: Watching

    /// Starts watching bluetoothd. The first event is `serviceAppeared` if
    /// bluetoothd is on the bus now; a restart shows as `serviceVanished`
    /// followed by `serviceAppeared`. The sequence pulls from one bounded
    /// signal buffer (`bufferLimit` signals); if the consumer falls that far
    /// behind, it gets `signalsLost` and a fresh `serviceAppeared` snapshot
    /// instead of a silently drifting tree. It ends when the bus connection
    /// closes or the consumer stops.
    public func events(bufferLimit: Int = 16384) async throws(BlueZError) -> BlueZEvents {
        do {
            // One stream for all three rules keeps signals in bus order, and
            // subscribing before GetManagedObjects means nothing falls between.
            let deliveries = try await bus.signalDeliveries(matchingAny: Self.serviceRules, bufferLimit: bufferLimit)
            return BlueZEvents(client: self, deliveries: deliveries)
        } catch {
            throw BlueZError(error)
        }
    }

    /// bluetoothd's object tree and property changes, believed only from
    /// org.bluez's current owner, and its comings and goings, only from the
    /// bus driver; each with the body's signature, checked before decoding.
    public static let serviceRules = [
        MatchRule(
            sender: BlueZ.service, interface: StandardInterface.objectManager, member: "InterfacesAdded", path: .root,
            signature: "oa{sa{sv}}"
        ),
        MatchRule(
            sender: BlueZ.service, interface: StandardInterface.objectManager, member: "InterfacesRemoved", path: .root,
            signature: "oas"
        ),
        MatchRule(
            sender: BlueZ.service, interface: StandardInterface.properties, member: "PropertiesChanged",
            pathNamespace: "/org/bluez", signature: "sa{sv}as"
        ),
        MatchRule(
            sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
            path: "/org/freedesktop/DBus", arg0: BlueZ.service, signature: "sss"
        ),
    ]

    /// The owner of org.bluez now, asked a few times before concluding there is none.
    func currentOwner() async -> String? {
        for attempt in 0..<3 {
            do throws(DBusError) {
                return try await bus.nameOwner(of: BlueZ.service)
            } catch {
                try? await bus.loop.sleep(for: .milliseconds(100 << attempt))
            }
        }
        return nil
    }

    /// bluetoothd's tree, retried briefly: bluetoothd takes its name before it
    /// exports its objects. Nil if it still does not answer.
    func snapshot(attempts: Int) async -> ObjectTree? {
        for attempt in 0..<attempts {
            if let tree = try? await managedObjects() { return tree }
            if attempt + 1 < attempts { try? await bus.loop.sleep(for: .milliseconds(100 << attempt)) }
        }
        return nil
    }

    /// The event a bus signal from bluetoothd stands for; nil for signals that
    /// are not ObjectManager or PropertiesChanged ones, or that do not have their shape.
    public static func event(from signal: Message) -> BlueZEvent? {
        guard let path = signal.path else { return nil }
        switch (signal.interface, signal.member) {
        case (StandardInterface.objectManager?, "InterfacesAdded"?):
            guard signal.body.count == 2, let object = signal.body[0].objectPath else { return nil }
            return .interfacesAdded(object, signal.body[1])
        case (StandardInterface.objectManager?, "InterfacesRemoved"?):
            guard signal.body.count == 2, let object = signal.body[0].objectPath,
                  let names = signal.body[1].stringArray else { return nil }
            return .interfacesRemoved(object, names)
        case (StandardInterface.properties?, "PropertiesChanged"?):
            guard signal.body.count == 3, let interface = signal.body[0].string,
                  let changed = signal.body[1].stringKeyedDictionary else { return nil }
            let invalidated = signal.body[2].stringArray ?? []
            if interface == BlueZ.gattCharacteristicInterface, let value = changed["Value"], changed.count == 1,
               let bytes = value.bytes
            {
                return .valueChanged(path, bytes)
            }
            return .propertiesChanged(path, interface: interface, changed: changed, invalidated: invalidated)
        case (BlueZ.deviceInterface?, "Disconnected"?):
            guard signal.body.count >= 1, let reason = signal.body[0].string else { return nil }
            return .deviceDisconnected(path, reason: reason, message: signal.body.count >= 2 ? (signal.body[1].string ?? "") : "")
        default:
            return nil
        }
    }

    public func managedObjects() async throws(BlueZError) -> ObjectTree {
        let reply = try await call(.root, StandardInterface.objectManager, "GetManagedObjects")
        guard let first = reply.first else { throw .malformed("empty GetManagedObjects reply") }
        return try ObjectTree(managedObjects: first)
    }

    // MARK: Adapter1

    public func setPowered(_ adapter: ObjectPath, _ on: Bool) async throws(BlueZError) {
        do {
            try await bus.setRemoteProperty(
                destination: BlueZ.service, path: adapter, interface: BlueZ.adapterInterface, name: "Powered",
                value: .boolean(on), timeout: callTimeout
            )
        } catch {
            throw BlueZError(error)
        }
    }

    /// Sets this client's discovery filter (filters are per D-Bus client).
    public func setDiscoveryFilter(
        _ adapter: ObjectPath, uuids: [String] = [], transport: String = "le", duplicateData: Bool = true
    ) async throws(BlueZError) {
        let filter = Self.discoveryFilter(uuids: uuids, transport: transport, duplicateData: duplicateData)
        _ = try await call(adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict(filter)])
    }

    static func discoveryFilter(uuids: [String], transport: String = "le", duplicateData: Bool = true) -> [String: DBusValue] {
        var filter: [String: DBusValue] = ["Transport": .string(transport), "DuplicateData": .boolean(duplicateData)]
        if !uuids.isEmpty { filter["UUIDs"] = .strings(uuids) }
        return filter
    }

    public func startDiscovery(_ adapter: ObjectPath) async throws(BlueZError) {
        _ = try await call(adapter, BlueZ.adapterInterface, "StartDiscovery")
    }

    public func stopDiscovery(_ adapter: ObjectPath) async throws(BlueZError) {
        _ = try await call(adapter, BlueZ.adapterInterface, "StopDiscovery")
    }

    // MARK: Device1

    /// Connects; an LE device that is already connected succeeds at once.
    /// `timeout` caps the attempt; on expiry the caller should cancel with
    /// `disconnect`, since bluetoothd may still be connecting.
    public func connect(_ device: ObjectPath, timeout: Duration) async throws(BlueZError) {
        _ = try await call(device, BlueZ.deviceInterface, "Connect", timeout: timeout)
    }

    /// Disconnects, or cancels a pending connect.
    public func disconnect(_ device: ObjectPath) async throws(BlueZError) {
        _ = try await call(device, BlueZ.deviceInterface, "Disconnect")
    }

    // MARK: GattCharacteristic1

    public func readValue(_ characteristic: ObjectPath, timeout: Duration? = nil) async throws(BlueZError) -> [UInt8] {
        let reply = try await call(
            characteristic, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])], timeout: timeout
        )
        guard let bytes = reply.first?.bytes else { throw .malformed("ReadValue reply is not ay") }
        return bytes
    }

    public func writeValue(
        _ characteristic: ObjectPath, _ value: [UInt8], type: WriteType, timeout: Duration? = nil
    ) async throws(BlueZError) {
        _ = try await call(
            characteristic, BlueZ.gattCharacteristicInterface, "WriteValue",
            [.bytes(value), .vardict(["type": .string(type.rawValue)])], timeout: timeout
        )
    }

    /// Starts a notify session for this D-Bus client. BlueZ keeps it across
    /// link losses and answers a repeat with success, so calling it again
    /// after a reconnect is safe and does not double notifications.
    public func startNotify(_ characteristic: ObjectPath) async throws(BlueZError) {
        _ = try await call(characteristic, BlueZ.gattCharacteristicInterface, "StartNotify")
    }

    public func stopNotify(_ characteristic: ObjectPath) async throws(BlueZError) {
        _ = try await call(characteristic, BlueZ.gattCharacteristicInterface, "StopNotify")
    }

    // MARK: Plumbing

    private func call(
        _ path: ObjectPath, _ interface: String, _ method: String, _ arguments: [DBusValue] = [],
        timeout: Duration? = nil
    ) async throws(BlueZError) -> [DBusValue] {
        do {
            return try await bus.call(
                destination: BlueZ.service, path: path, interface: interface, method: method, arguments,
                timeout: timeout ?? callTimeout
            )
        } catch {
            throw BlueZError(error)
        }
    }
}
