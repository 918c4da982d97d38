import DBus

/// One call to bluetoothd, as a value: what the daemon's action lane sends.
///
/// `BlueZClient.send(_:completion:)` puts the call on the bus at once and
/// returns; the reply comes back through `completion` on the bus's loop.
/// Requests sent one after another reach bluetoothd in that order, whatever
/// their replies do: a `Disconnect` that cancels a stuck `Connect` is never
/// overtaken by the next `Connect`.
public enum BlueZRequest: Sendable, Equatable {
    case connect(ObjectPath, timeout: Duration)
    case disconnect(ObjectPath)
    case startNotify(ObjectPath)
    /// Replies `(h fd, q mtu)`; read it with `AcquiredNotifications(reply:)`.
    case acquireNotify(ObjectPath)
    case writeValue(ObjectPath, [UInt8], type: WriteType, timeout: Duration)
    case readValue(ObjectPath, timeout: Duration)
    case setPowered(ObjectPath, Bool)
    case setDiscoveryFilter(ObjectPath, uuids: [String])
    case startDiscovery(ObjectPath)
    case stopDiscovery(ObjectPath)
    /// Adapter1.RemoveDevice(device): bluetoothd forgets the device object
    /// (and its bond, if any); discovery makes it anew.
    case removeDevice(adapter: ObjectPath, device: ObjectPath)
    case getManagedObjects
    /// Device1.Pair: bonds with the device through the caller's agent (or
    /// the default one), connecting first if need be.
    case pair(ObjectPath, timeout: Duration)
    /// Device1.Trusted = value.
    case setTrusted(ObjectPath, Bool)
    /// AgentManager1.RegisterAgent(agent, capability), on the caller's connection.
    case registerAgent(ObjectPath, capability: String)
    /// AgentManager1.RequestDefaultAgent(agent): pairings the kernel starts
    /// (a characteristic that needs encryption) go to the default agent.
    case requestDefaultAgent(ObjectPath)
    /// org.freedesktop.DBus.Peer.Ping: answered by bluetoothd's D-Bus
    /// library from its main loop, with no radio or kernel work, so no
    /// answer within `timeout` means that loop is hung.
    case ping(timeout: Duration)
}

extension BlueZClient {
    /// Sends `request` now; `completion` runs on the bus's loop with the
    /// reply's body or the classified error. Call on the bus's loop.
    public func send(
        _ request: BlueZRequest, completion: @escaping @Sendable (Result<[DBusValue], BlueZError>) -> Void
    ) {
        let (path, interface, member, arguments, timeout) = shape(of: request)
        bus.assumeIsolated { bus in
            bus.startCall(
                destination: BlueZ.service, path: path, interface: interface, method: member, arguments,
                timeout: timeout, completion: Self.replyBody(completion)
            )
        }
    }

    /// `request` marshalled once, for sending many times: `send(_:)` asks
    /// for no answer, `send(_:timeout:completion:)` waits for it. (The
    /// request's own timeout is not part of the call; each send gives one.)
    /// A request whose call would carry file descriptors cannot be prepared.
    public func prepare(_ request: BlueZRequest) throws(BlueZError) -> PreparedCall {
        let (path, interface, member, arguments, _) = shape(of: request)
        do {
            return try PreparedCall(destination: BlueZ.service, path: path, interface: interface, method: member, arguments)
        } catch {
            throw BlueZError(error)
        }
    }

    /// Sends a prepared call now, after every request sent before it, asking
    /// for no answer: bluetoothd's D-Bus library sends none to a call that
    /// asks for none (`gdbus/object.c`). Throws only when the bus cannot
    /// take it. Call on the bus's loop.
    public func send(_ call: PreparedCall) throws(BlueZError) {
        let sent: Result<Void, DBusError> = bus.assumeIsolated { bus in
            Result { () throws(DBusError) in try bus.send(call) }
        }
        try sent.mapError(BlueZError.init).get()
    }

    /// Sends a prepared call now, as `send(_:completion:)` sends a request,
    /// and waits up to `timeout` for its answer. Call on the bus's loop.
    public func send(
        _ call: PreparedCall, timeout: Duration,
        completion: @escaping @Sendable (Result<[DBusValue], BlueZError>) -> Void
    ) {
        bus.assumeIsolated { bus in
            bus.startCall(call, timeout: timeout, completion: Self.replyBody(completion))
        }
    }

    /// What both reply-waiting sends hand their caller: the reply's body,
    /// or the error classified as bluetoothd's.
    private static func replyBody(
        _ completion: @escaping @Sendable (Result<[DBusValue], BlueZError>) -> Void
    ) -> @Sendable (Result<Message, DBusError>) -> Void {
        { result in completion(result.map { $0.body }.mapError(BlueZError.init)) }
    }

    private func shape(of request: BlueZRequest)
        -> (ObjectPath, String, String, [DBusValue], Duration)
    {
        switch request {
        case .connect(let device, let timeout):
            (device, BlueZ.deviceInterface, "Connect", [], timeout)
        case .disconnect(let device):
            (device, BlueZ.deviceInterface, "Disconnect", [], callTimeout)
        case .startNotify(let characteristic):
            (characteristic, BlueZ.gattCharacteristicInterface, "StartNotify", [], callTimeout)
        case .acquireNotify(let characteristic):
            (characteristic, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])], callTimeout)
        case .writeValue(let characteristic, let bytes, let type, let timeout):
            (characteristic, BlueZ.gattCharacteristicInterface, "WriteValue",
             [.bytes(bytes), .vardict(["type": .string(type.rawValue)])], timeout)
        case .readValue(let characteristic, let timeout):
            (characteristic, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])], timeout)
        case .setPowered(let adapter, let on):
            (adapter, StandardInterface.properties, "Set",
             [.string(BlueZ.adapterInterface), .string("Powered"), .variant(.boolean(on))], callTimeout)
        case .setDiscoveryFilter(let adapter, let uuids):
            (adapter, BlueZ.adapterInterface, "SetDiscoveryFilter",
             [.vardict(Self.discoveryFilter(uuids: uuids))], callTimeout)
        case .startDiscovery(let adapter):
            (adapter, BlueZ.adapterInterface, "StartDiscovery", [], callTimeout)
        case .stopDiscovery(let adapter):
            (adapter, BlueZ.adapterInterface, "StopDiscovery", [], callTimeout)
        case .removeDevice(let adapter, let device):
            (adapter, BlueZ.adapterInterface, "RemoveDevice", [.objectPath(device)], callTimeout)
        case .getManagedObjects:
            (.root, StandardInterface.objectManager, "GetManagedObjects", [], callTimeout)
        case .pair(let device, let timeout):
            (device, BlueZ.deviceInterface, "Pair", [], timeout)
        case .setTrusted(let device, let value):
            (device, StandardInterface.properties, "Set",
             [.string(BlueZ.deviceInterface), .string("Trusted"), .variant(.boolean(value))], callTimeout)
        case .registerAgent(let agent, let capability):
            (BlueZ.managerPath, BlueZ.agentManagerInterface, "RegisterAgent", [.objectPath(agent), .string(capability)], callTimeout)
        case .requestDefaultAgent(let agent):
            (BlueZ.managerPath, BlueZ.agentManagerInterface, "RequestDefaultAgent", [.objectPath(agent)], callTimeout)
        case .ping(let timeout):
            (.root, StandardInterface.peer, "Ping", [], timeout)
        }
    }
}
