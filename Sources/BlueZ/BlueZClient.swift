import DBus

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
    /// followed by `serviceAppeared`. The stream is bounded (`bufferLimit`
    /// events); it ends when the bus connection closes or the consumer stops.
    public func events(bufferLimit: Int = 16384) async throws(BlueZError) -> AsyncStream<BlueZEvent> {
        let signals: AsyncStream<Message>
        do {
            // One stream for all three rules keeps signals in bus order, and
            // subscribing before GetManagedObjects means nothing falls between.
            signals = try await bus.signals(matchingAny: [
                MatchRule(sender: BlueZ.service, interface: StandardInterface.objectManager, path: .root),
                MatchRule(
                    sender: BlueZ.service, interface: StandardInterface.properties, member: "PropertiesChanged",
                    pathNamespace: "/org/bluez"
                ),
                MatchRule(
                    sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    arg0: BlueZ.service
                ),
            ], bufferLimit: bufferLimit)
        } catch {
            throw BlueZError(error)
        }
        let (stream, continuation) = AsyncStream.makeStream(
            of: BlueZEvent.self, bufferingPolicy: .bufferingOldest(bufferLimit)
        )
        let client = self
        let pump = Task {
            var owner: String?
            if let current = try? await client.bus.nameOwner(of: BlueZ.service) {
                owner = await client.announce(owner: current, to: continuation)
            }
            for await signal in signals {
                if signal.member == "NameOwnerChanged", signal.interface == "org.freedesktop.DBus" {
                    let newOwner = signal.body.count >= 3 ? (signal.body[2].string ?? "") : ""
                    // The owner we announced may reach us again as a buffered
                    // NameOwnerChanged from just before we asked for it.
                    if newOwner == owner { continue }
                    if owner != nil {
                        owner = nil
                        continuation.yield(.serviceVanished)
                    }
                    if !newOwner.isEmpty {
                        owner = await client.announce(owner: newOwner, to: continuation)
                    }
                    continue
                }
                // Signals are routed by the bus to the owner of org.bluez, but
                // the sender is checked too: a stale signal from a previous
                // bluetoothd must not touch the new tree.
                guard let owner, signal.sender == owner, let event = BlueZClient.event(from: signal) else { continue }
                continuation.yield(event)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in pump.cancel() }
        return stream
    }

    /// Loads the tree of a new bluetoothd and reports it; returns the owner
    /// if that worked. A bluetoothd that is on the bus but does not answer
    /// yet is retried on its next signal (its name appearing is enough for us
    /// to try again later).
    private func announce(owner: String, to continuation: AsyncStream<BlueZEvent>.Continuation) async -> String? {
        for attempt in 0..<5 {
            do {
                let tree = try await managedObjects()
                continuation.yield(.serviceAppeared(owner: owner, tree: tree))
                return owner
            } catch {
                // bluetoothd registers its name before its objects; give it a moment.
                try? await Task.sleep(for: .milliseconds(100 << attempt))
            }
        }
        continuation.yield(.serviceAppeared(owner: owner, tree: ObjectTree()))
        return owner
    }

    static func event(from signal: Message) -> BlueZEvent? {
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
        var filter: [String: DBusValue] = ["Transport": .string(transport), "DuplicateData": .boolean(duplicateData)]
        if !uuids.isEmpty { filter["UUIDs"] = .strings(uuids) }
        _ = try await call(adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict(filter)])
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
