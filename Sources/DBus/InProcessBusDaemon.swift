import CDBus
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A model of dbus-daemon in this process, for the deterministic simulation
/// and tests: `Bus`es connect to it (`Bus.connect(to:)`) and exchange real
/// libdbus messages through it, which it routes as the system bus does,
/// where Tether depends on it (dbus-daemon 1.14, Debian's system policy):
///
/// - unique names `:1.N` in the order connections say Hello; Hello first,
///   or the connection is dropped;
/// - every routed message's sender stamped with the sending connection's
///   unique name (the only field a receiver may trust);
/// - method calls and replies routed by destination, unique or well-known; a
///   message to a name nobody owns answered with `ServiceUnknown` (or
///   `NameHasNoOwner` without auto-start), even a signal or a call asking
///   for no reply, as dbus-daemon does; a reply only to a call this daemon
///   passed on and the callee has not answered (else `AccessDenied`, the
///   system policy's `send_requested_reply`), at most
///   `maxPendingRepliesPerConnection` calls awaiting replies per caller;
/// - a signal with a destination reaches that connection whatever its match
///   rules say (as attackers use); one without reaches every connection with
///   a matching AddMatch rule, once;
/// - the bus driver's methods, errors and signals (`+Driver.swift`);
/// - a connection that ends (closed, `disconnect`) releases its names, the
///   last acquired first, then its unique name, each with NameOwnerChanged,
///   and each caller still waiting for it gets `NoReply`.
///
/// Delivery is asynchronous and in order per receiver (so per sender and
/// receiver), through `InProcessBusPort`, never inside the send.
///
/// Not modelled: policy beyond unrequested replies (every connection may own
/// any name and call anything), file descriptor passing (`canPassUnixFDs` is
/// false), eavesdropping and monitors, activation, the daemon's own reply
/// timeout (dbus-daemon's default is none), message size limits and
/// credentials other than a process ID given at connect.
///
/// Threading: an actor whose executor is the loop of the buses it serves;
/// connections and ports reach it synchronously on that loop
/// (`assumeIsolated`).
///
/// Invariants:
/// - `clients` holds exactly the connections whose both ends are open;
/// - every entry of `pendingReplies` names two connections in `clients`;
/// - messages are written to ports only, and read in a later loop turn.
public actor InProcessBusDaemon {
    public nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// The bus driver's name, which no connection can own.
    static let driverName = "org.freedesktop.DBus"
    static let driverPath = "/org/freedesktop/DBus"

    /// What the daemon has moved, for tests and benchmarks.
    public struct Statistics: Sendable, Equatable {
        /// Messages connections sent to the daemon, Hello and driver calls included.
        public var routed = 0
        /// Messages connections read, the driver's own included; a broadcast
        /// counts once per receiver.
        public var delivered = 0
        /// Messages not passed on: to a name nobody owns, replies nobody
        /// asked for, calls over a limit, anything before Hello.
        public var refused = 0
        /// Messages a connection never read because it closed first.
        public var lost = 0
    }
    public private(set) var statistics = Statistics()

    /// dbus-daemon's `max_replies_per_connection` (128 on Debian's system bus).
    public private(set) var maxPendingRepliesPerConnection = 128
    /// dbus-daemon's `max_match_rules_per_connection` (512).
    public private(set) var maxMatchRulesPerConnection = 512

    /// The daemon's record of one connection.
    struct Client {
        let port: InProcessBusPort
        let processID: UInt32
        /// Set by Hello.
        var uniqueName: String?
        var matchRules: [DaemonMatchRule] = []
    }
    var clients: [Int: Client] = [:]
    /// The keys of `clients`, in connection order: the order broadcasts go out in.
    private var clientOrder: [Int] = []
    var idsByUniqueName: [String: Int] = [:]
    var names = BusNameRegistry()
    /// Calls passed on and not answered yet: the caller and its serial, to
    /// the callee and the order the calls were made in.
    struct CallKey: Hashable {
        var caller: Int
        var serial: UInt32
    }
    var pendingReplies: [CallKey: (callee: Int, order: Int)] = [:]
    var pendingCountByCaller: [Int: Int] = [:]
    private var callOrder = 0
    private var nextConnectionID = 0
    var nextUniqueNumber = 0
    var driverSerial: UInt32 = 0
    /// False between `stop()` and `start()`: connecting fails.
    public private(set) var isRunning = true
    /// Told every message as it is handed to a connection, with that
    /// connection's unique name: what the deterministic simulation watches
    /// of the bus. Nil: nothing of it is read.
    public private(set) var deliveryTap: (@Sendable (BusTrafficRecord) -> Void)?

    public init(loop: EventLoop = .shared) {
        self.loop = loop
    }

    // MARK: Inspecting

    /// The unique names of the connections, in the order they said Hello.
    public var connectionNames: [String] {
        clientOrder.compactMap { clients[$0]?.uniqueName }
    }

    /// The unique name of `name`'s primary owner (a well-known or unique
    /// name), nil when nobody owns it.
    public func owner(of name: String) -> String? {
        if name.hasPrefix(":") { return idsByUniqueName[name] == nil ? nil : name }
        return names.owner(of: name).flatMap { clients[$0]?.uniqueName }
    }

    /// Sets (or, nil, removes) `deliveryTap`.
    public func tapDeliveries(_ tap: (@Sendable (BusTrafficRecord) -> Void)?) {
        deliveryTap = tap
    }

    /// Hands `message` (stamped and locked) to `client`'s end of its port.
    func deliver(_ message: OpaquePointer, to client: Client) {
        if let deliveryTap, let receiver = client.uniqueName {
            deliveryTap(BusTrafficRecord(message, receiver: receiver))
        }
        client.port.write(message)
    }

    // MARK: Limits

    public func limitPendingReplies(perConnection limit: Int) {
        maxPendingRepliesPerConnection = max(1, limit)
    }

    public func limitMatchRules(perConnection limit: Int) {
        maxMatchRulesPerConnection = max(1, limit)
    }

    // MARK: Faults

    /// Ends a connection from the daemon's side, as when its process dies:
    /// its names are released (NameOwnerChanged), callers waiting for it get
    /// `NoReply`, and its `Bus` reads what was queued for it, then the
    /// hang-up. False if no connection has that unique name.
    @discardableResult
    public func disconnect(_ uniqueName: String) -> Bool {
        guard let id = idsByUniqueName[uniqueName], let client = clients[id] else { return false }
        end(id)
        client.port.daemonClosed()
        return true
    }

    /// Stops the bus, as when the system bus goes down: every connection is
    /// closed at once (nobody is left to hear about names), and connecting
    /// fails until `start()`.
    public func stop() {
        isRunning = false
        let ports = clientOrder.compactMap { clients[$0]?.port }
        clients.removeAll()
        clientOrder.removeAll()
        idsByUniqueName.removeAll()
        names = BusNameRegistry()
        pendingReplies.removeAll()
        pendingCountByCaller.removeAll()
        for port in ports { port.daemonClosed() }
    }

    /// Starts a stopped bus afresh: unique names count from `:1.0` again, as
    /// in a new dbus-daemon.
    public func start() {
        guard !isRunning else { return }
        isRunning = true
        nextUniqueNumber = 0
    }

    /// `stop()` then `start()`: every connection closed, new ones welcome.
    public func restart() {
        stop()
        start()
    }

    // MARK: Connections (called by Connection and InProcessBusPort on the loop)

    func accept(_ connection: Connection, processID: UInt32) -> Result<InProcessBusPort, DBusError> {
        guard isRunning else { return .failure(.connectFailed("the in-process bus is stopped")) }
        let id = nextConnectionID
        nextConnectionID += 1
        let port = InProcessBusPort(daemon: self, id: id, client: connection)
        clients[id] = Client(port: port, processID: processID)
        clientOrder.append(id)
        return .success(port)
    }

    /// The client closed its end.
    func hungUp(_ port: InProcessBusPort) {
        guard clients[port.id] != nil else { return }
        end(port.id)
    }

    func noteRead(_ read: Int, lost: Int) {
        statistics.delivered += read
        statistics.lost += lost
    }

    /// What dbus-daemon does when a connection ends: its names go, last
    /// acquired first, then its unique name; callers waiting for it get
    /// NoReply (dbus-daemon 1.14 answers the latest call first); its own
    /// calls are forgotten.
    private func end(_ id: Int) {
        guard let client = clients[id] else { return }
        // It hears no more broadcasts, but its names are its own until announced.
        clientOrder.removeAll { $0 == id }
        for change in names.removeConnection(id) { announce(change, leaving: id) }
        clients[id] = nil
        if let unique = client.uniqueName {
            idsByUniqueName[unique] = nil
            emitNameOwnerChanged(unique, old: unique, new: "")
        }
        let abandoned = pendingReplies.filter { $0.value.callee == id }.sorted { $0.value.order > $1.value.order }
        for (key, _) in abandoned {
            pendingReplies[key] = nil
            pendingCountByCaller[key.caller, default: 1] -= 1
            sendNoReply(to: key)
        }
        for key in pendingReplies.keys where key.caller == id { pendingReplies[key] = nil }
        pendingCountByCaller[id] = nil
    }

    // MARK: Routing

    /// A message from `port`'s client, with its serial; lent for this call.
    func route(_ message: OpaquePointer, from port: InProcessBusPort) {
        statistics.routed += 1
        guard let client = clients[port.id] else { return }
        guard let unique = client.uniqueName else {
            if Self.isHello(message) {
                welcome(port.id, message)
            } else {
                // dbus-daemon drops a client whose first message is not Hello.
                statistics.refused += 1
                end(port.id)
                port.daemonClosed()
            }
            return
        }
        guard dbus_message_set_sender(message, unique) != 0 else { return }
        dbus_message_lock(message)
        guard let destinationPointer = dbus_message_get_destination(message) else {
            broadcast(message, from: port.id)
            return
        }
        let destination = String(cString: destinationPointer)
        if destination == Self.driverName {
            serveDriver(message, from: port.id)
            return
        }
        guard let recipient = resolve(destination) else {
            let autoStart = dbus_message_get_auto_start(message) != 0
            refuse(
                message, from: port.id, autoStart ? DBusErrorName.serviceUnknown : DBusErrorName.nameHasNoOwner,
                autoStart ? "The name \(destination) was not provided by any .service files"
                    : "Name \"\(destination)\" does not exist"
            )
            return
        }
        switch dbus_message_get_type(message) {
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN, CDBUS_MESSAGE_TYPE_ERROR:
            let key = CallKey(caller: recipient, serial: dbus_message_get_reply_serial(message))
            guard pendingReplies[key]?.callee == port.id else {
                refuse(message, from: port.id, DBusErrorName.accessDenied, "Rejected send message: a reply nobody asked for")
                return
            }
            pendingReplies[key] = nil
            pendingCountByCaller[recipient, default: 1] -= 1
        case CDBUS_MESSAGE_TYPE_METHOD_CALL where dbus_message_get_no_reply(message) == 0:
            guard pendingCountByCaller[port.id, default: 0] < maxPendingRepliesPerConnection else {
                refuse(message, from: port.id, DBusErrorName.limitsExceeded,
                       "The maximum number of pending replies per connection has been reached")
                return
            }
            callOrder += 1
            pendingReplies[CallKey(caller: port.id, serial: dbus_message_get_serial(message))] = (recipient, callOrder)
            pendingCountByCaller[port.id, default: 0] += 1
        default:
            break
        }
        if let client = clients[recipient] { deliver(message, to: client) }
    }

    /// The connection a destination names: a unique name, or a well-known
    /// name's primary owner.
    private func resolve(_ destination: String) -> Int? {
        destination.hasPrefix(":") ? idsByUniqueName[destination] : names.owner(of: destination)
    }

    /// A message without a destination: to every connection with a matching
    /// rule, once each, in connection order. `sender` nil: the bus driver.
    func broadcast(_ message: OpaquePointer, from sender: Int?) {
        let senderClient = sender.flatMap { clients[$0] }
        let senderOwns: ((String) -> Bool)? = senderClient.map { client in
            { name in
                name.hasPrefix(":") ? name == client.uniqueName : self.names.owner(of: name) == sender
            }
        }
        for id in clientOrder {
            guard let client = clients[id], client.uniqueName != nil,
                  client.matchRules.contains(where: { $0.matches(message, senderOwns: senderOwns) })
            else { continue }
            deliver(message, to: client)
        }
    }

    /// Answers `message` with an error from the bus driver instead of
    /// passing it on.
    private func refuse(_ message: OpaquePointer, from sender: Int, _ name: String, _ text: String) {
        statistics.refused += 1
        sendError(replyingTo: message, to: sender, name, text)
    }

    private static func isHello(_ message: OpaquePointer) -> Bool {
        dbus_message_get_type(message) == CDBUS_MESSAGE_TYPE_METHOD_CALL
            && dbus_message_has_destination(message, driverName) != 0
            && dbus_message_has_member(message, "Hello") != 0
            && (dbus_message_get_interface(message) == nil || dbus_message_has_interface(message, driverName) != 0)
    }
}
