import CDBus
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One connection to a message bus.
///
/// `Bus` is an actor whose executor is an `EventLoop`: its methods, libdbus's
/// callbacks and the loop's handlers for the socket all run on the loop's
/// thread, one at a time. Every wait (a reply, a signal) is a suspension or
/// a callback, never a blocking libdbus call.
///
/// Two ways to use it: the `async` methods (clients, tests, the simulator),
/// and, for code that runs on the same loop (the daemon), synchronous ones
/// (`startCall`, `addSignalHandler`, `setSignalInterceptor`) whose callbacks
/// run on the loop in the order the messages arrived: no task, no hop.
public actor Bus {
    /// Where the reply-less bus daemon lives.
    static let daemonName = "org.freedesktop.DBus"
    static let daemonPath: ObjectPath = "/org/freedesktop/DBus"

    public nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    nonisolated let connection: Connection
    /// The unique name the bus daemon gave this connection (`:1.42`).
    public private(set) var uniqueName = ""
    public private(set) var isConnected = false
    /// Whether Unix file descriptors (`h`) can be sent and received here
    /// (negotiated while authenticating; false on TCP and on a closed bus).
    public var canPassUnixFDs: Bool { connection.canPassUnixFDs }
    /// Signals dropped because a subscriber's buffer was full.
    public private(set) var droppedSignals = 0

    var registry = ObjectRegistry()
    /// The well-known names whose owners rules rely on (`MatchRule.Sender.ownerOf`),
    /// and what the bus driver said of each: tracked for as long as the
    /// connection lives.
    var ownerTracking: [String: OwnerTracking] = [:]
    enum OwnerTracking {
        /// AddMatch and GetNameOwner under way; these wait for the answer.
        case pending([CheckedContinuation<Void, Never>])
        /// The current unique owner, nil while nobody owns the name.
        case known(String?)
    }
    /// Exported methods' handlers running, by caller: each caller gets at
    /// most `callsInFlightPerCaller`, so that no one local client can pile
    /// up work in the daemon.
    var callsInFlight: [String: Int] = [:]
    /// How many exported method calls one caller may have running at once
    /// by default: a daemon's control API, where 4 is plenty for a CLI.
    public static let defaultCallsInFlightPerCaller = 4
    /// How many exported method calls one caller may have running here at
    /// once; the next is refused with `LimitsExceeded` unread.
    public private(set) var callsInFlightPerCaller = Bus.defaultCallsInFlightPerCaller

    /// Sets how many exported method calls one caller may have running at
    /// once. A stand-in for a service without such a limit (the simulated
    /// bluetoothd) sets dbus-daemon's own bound on a caller's pending
    /// replies instead, so that calls left hanging by a fault pile up there
    /// as they would on a real bus.
    public func limitCallsInFlight(perCaller limit: Int) {
        callsInFlightPerCaller = max(1, limit)
    }
    var subscriptions: [Int: Subscription] = [:]
    /// Set while `serveMethodCalls()` runs.
    private var methodCalls: AsyncStream<@Sendable () async -> Void>.Continuation?
    var signalHandlers: [Int: (rules: [MatchRule], handler: @Sendable (Message) -> Void)] = [:]
    private var nextSubscriptionID = 0
    private var closeWaiters: [(id: Int, continuation: CheckedContinuation<Void, Never>)] = []
    struct Subscription {
        var rules: [MatchRule]
        var sink: Sink

        enum Sink {
            case messages(AsyncStream<Message>.Continuation)
            /// With the count of signals lost since the last delivery.
            case deliveries(AsyncStream<SignalDelivery>.Continuation, lost: Int)
        }

        func finish() {
            switch sink {
            case .messages(let continuation): continuation.finish()
            case .deliveries(let continuation, _): continuation.finish()
            }
        }
    }

    /// The default timeout of libdbus for method calls.
    public static let defaultTimeout: Duration = .seconds(25)

    init(loop: EventLoop) {
        self.loop = loop
        connection = Connection(loop: loop)
    }

    /// A bus dropped without `close()` still closes its connection, so
    /// libdbus never calls back into freed memory.
    deinit {
        let connection = self.connection
        loop.execute { connection.close() }
    }

    // The registry, the subscriptions, the handlers, the owners and the calls
    // in flight are internal, not private, only for the admission checks in
    // Bus+Admission.swift; nothing outside `Bus` touches them.

    // MARK: Connecting

    /// Connects to the bus at `address` (e.g. `unix:path=/run/dbus/system_bus_socket`)
    /// and registers with Hello.
    public static func connect(
        address: String, on loop: EventLoop = .shared, timeout: Duration = defaultTimeout
    ) async throws(DBusError) -> Bus {
        let bus = Bus(loop: loop)
        try await bus.open(address: address, timeout: timeout)
        return bus
    }

    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS` if set, as libdbus does, else
    /// the standard socket.
    public static func system(on loop: EventLoop = .shared) async throws(DBusError) -> Bus {
        let address = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) }
            ?? "unix:path=/var/run/dbus/system_bus_socket"
        return try await connect(address: address, on: loop)
    }

    /// The session bus from `DBUS_SESSION_BUS_ADDRESS`.
    public static func session(on loop: EventLoop = .shared) async throws(DBusError) -> Bus {
        guard let address = getenv("DBUS_SESSION_BUS_ADDRESS").map({ String(cString: $0) }) else {
            throw .connectFailed("DBUS_SESSION_BUS_ADDRESS is not set")
        }
        return try await connect(address: address, on: loop)
    }

    private func open(address: String, timeout: Duration) async throws(DBusError) {
        try connection.open(address: address)
        try await register(timeout: timeout)
    }

    /// Takes the messages of the connection just opened, on either
    /// transport, and says Hello.
    func register(timeout: Duration) async throws(DBusError) {
        isConnected = true
        connection.onMessage = { [weak self] message in
            self?.assumeIsolated { $0.route(message) }
        }
        connection.onClose = { [weak self] in
            self?.assumeIsolated { $0.connectionClosed() }
        }
        connection.signalAdmission = { [weak self] signal in
            // Checked synchronously on the loop, within libdbus's dispatch
            // that lends the message: it never leaves this call.
            nonisolated(unsafe) let borrowed = signal
            return self?.assumeIsolated { $0.admits(borrowed) } ?? false
        }
        connection.callAdmission = { [weak self] header in
            guard let self else { return CallRefusal(name: DBusErrorName.failed, text: "the connection is closing") }
            return assumeIsolated { $0.admits(call: header) }
        }
        // dbus_bus_register would block for the reply; send Hello ourselves
        // and tell libdbus the name it returns.
        do throws(DBusError) {
            let reply = try await callDaemon("Hello", [], timeout: timeout)
            guard let name = reply.first?.string, connection.isOpen else {
                throw DBusError.malformed("Hello reply")
            }
            uniqueName = name
            connection.setUniqueName(name)
        } catch {
            connection.close()
            throw error
        }
    }

    /// Closes the connection: pending calls fail with `.disconnected`,
    /// messages libdbus has not written yet are dropped (wait for a reply
    /// first where delivery matters),
    /// signal streams finish, owned names are released by the bus daemon.
    public func close() {
        connection.close()
    }

    /// Suspends until the connection closes (the bus went away or `close()` ran).
    /// Returns early if the task is cancelled.
    public func waitUntilClosed() async {
        guard isConnected, !Task.isCancelled else { return }
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Checked again: getting here may take a turn of the loop,
                // which may have closed the connection meanwhile.
                if isConnected, !Task.isCancelled {
                    closeWaiters.append((id, continuation))
                } else {
                    continuation.resume()
                }
            }
        } onCancel: { [loop] in
            loop.execute { self.assumeIsolated { $0.resumeCloseWaiter(id) } }
        }
    }

    private func resumeCloseWaiter(_ id: Int) {
        guard let index = closeWaiters.firstIndex(where: { $0.id == id }) else { return }
        closeWaiters.remove(at: index).continuation.resume()
    }

    private func connectionClosed() {
        isConnected = false
        for (_, tracking) in ownerTracking {
            if case .pending(let waiters) = tracking { for waiter in waiters { waiter.resume() } }
        }
        ownerTracking.removeAll()
        callsInFlight.removeAll()
        for (_, subscription) in subscriptions { subscription.finish() }
        subscriptions.removeAll()
        signalHandlers.removeAll()
        methodCalls?.finish()
        registry = ObjectRegistry()
        let waiters = closeWaiters
        closeWaiters.removeAll()
        for waiter in waiters { waiter.continuation.resume() }
    }

    // MARK: Calling

    /// Calls a method and returns the reply's body.
    public func call(
        destination: String?, path: ObjectPath, interface: String?, method: String,
        _ arguments: [DBusValue] = [], timeout: Duration = defaultTimeout
    ) async throws(DBusError) -> [DBusValue] {
        try await callMessage(
            destination: destination, path: path, interface: interface, method: method, arguments, timeout: timeout
        ).body
    }

    /// Calls a method and returns the whole reply message.
    public func callMessage(
        destination: String?, path: ObjectPath, interface: String?, method: String,
        _ arguments: [DBusValue] = [], timeout: Duration = defaultTimeout
    ) async throws(DBusError) -> Message {
        let message = try OutgoingMessage.methodCall(
            destination: destination, path: path, interface: interface, member: method, body: arguments
        )
        let handle = CallHandle()
        let result: Result<Message, DBusError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                handle.pending = connection.call(message, timeout: timeout) { result in
                    continuation.resume(returning: result)
                }
            }
        } onCancel: {
            loop.execute { handle.pending?.cancel(with: .cancelled) }
        }
        return try result.get()
    }

    /// Sends a method call now and returns; `completion` runs on the loop
    /// with the reply. Calls started one after another reach the peer in
    /// that order (one socket, written in order), whatever their replies do.
    public func startCall(
        destination: String?, path: ObjectPath, interface: String?, method: String,
        _ arguments: [DBusValue] = [], timeout: Duration = defaultTimeout,
        completion: @escaping @Sendable (Result<Message, DBusError>) -> Void
    ) {
        startCall(timeout: timeout, completion: completion) { () throws(DBusError) in
            try OutgoingMessage.methodCall(
                destination: destination, path: path, interface: interface, member: method, body: arguments
            )
        }
    }

    /// Sends a copy of a prepared call now, after everything sent before
    /// it, and waits for its reply as `startCall` does.
    public func startCall(
        _ call: PreparedCall, timeout: Duration = defaultTimeout,
        completion: @escaping @Sendable (Result<Message, DBusError>) -> Void
    ) {
        startCall(timeout: timeout, completion: completion) { () throws(DBusError) in try call.template.copy() }
    }

    /// Sends a method call without waiting for (or wanting) a reply.
    public func callNoReply(
        destination: String?, path: ObjectPath, interface: String?, method: String, _ arguments: [DBusValue] = []
    ) throws(DBusError) {
        try sendNoReply { () throws(DBusError) in
            try OutgoingMessage.methodCall(
                destination: destination, path: path, interface: interface, member: method, body: arguments
            )
        }
    }

    /// Sends a copy of a prepared call now, after everything sent before it,
    /// asking for no reply: nothing answers it.
    public func send(_ call: PreparedCall) throws(DBusError) {
        try sendNoReply { () throws(DBusError) in try call.template.copy() }
    }

    /// The one way a call waiting for its reply is sent: a message that
    /// cannot be made fails the completion, as a failed send would.
    private func startCall(
        timeout: Duration, completion: @escaping @Sendable (Result<Message, DBusError>) -> Void,
        _ makeMessage: () throws(DBusError) -> OutgoingMessage
    ) {
        let message: OutgoingMessage
        do {
            message = try makeMessage()
        } catch {
            completion(.failure(error))
            return
        }
        _ = connection.call(message, timeout: timeout, completion: completion)
    }

    /// The one way a call asking for no reply is sent.
    private func sendNoReply(_ makeMessage: () throws(DBusError) -> OutgoingMessage) throws(DBusError) {
        let message = try makeMessage()
        message.setNoReply()
        try connection.send(message)
    }

    private func callDaemon(_ method: String, _ arguments: [DBusValue], timeout: Duration = defaultTimeout)
        async throws(DBusError) -> [DBusValue]
    {
        try await call(
            destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: method,
            arguments, timeout: timeout
        )
    }

    // MARK: Signals

    /// Emits a signal from one of this connection's objects.
    public func emit(
        path: ObjectPath, interface: String, member: String, _ body: [DBusValue] = [], destination: String? = nil
    ) throws(DBusError) {
        try connection.send(
            OutgoingMessage.signal(path: path, interface: interface, member: member, body: body, destination: destination)
        )
    }

    /// Subscribes to signals. The stream is bounded: when its consumer falls
    /// `bufferLimit` signals behind, newer signals are dropped and counted in
    /// `droppedSignals`. The match rule is installed on the bus before this
    /// returns, so no signal sent afterwards is missed. Ending the iteration
    /// removes the rule.
    public func signals(matching rule: MatchRule, bufferLimit: Int = 8192) async throws(DBusError)
        -> AsyncStream<Message>
    {
        try await signals(matchingAny: [rule], bufferLimit: bufferLimit)
    }

    /// One stream for several rules: a signal matching any of them is
    /// delivered once, and signals keep the order in which they arrived.
    /// (Separate streams cannot promise an order between each other.)
    public func signals(matchingAny rules: [MatchRule], bufferLimit: Int = 8192) async throws(DBusError)
        -> AsyncStream<Message>
    {
        let (stream, continuation) = AsyncStream.makeStream(
            of: Message.self, bufferingPolicy: .bufferingOldest(max(1, bufferLimit))
        )
        try await subscribe(rules, .messages(continuation)) { ended in continuation.onTermination = { _ in ended() } }
        return stream
    }

    /// Like `signals(matchingAny:)`, but a consumer that fell behind is told:
    /// after signals were dropped, the stream delivers `.lost(count)` before
    /// the next signal, so it can resynchronise (re-read the state the
    /// signals described) instead of drifting.
    public func signalDeliveries(matchingAny rules: [MatchRule], bufferLimit: Int = 8192) async throws(DBusError)
        -> AsyncStream<SignalDelivery>
    {
        let (stream, continuation) = AsyncStream.makeStream(
            of: SignalDelivery.self, bufferingPolicy: .bufferingOldest(max(2, bufferLimit))
        )
        try await subscribe(rules, .deliveries(continuation, lost: 0)) { ended in
            continuation.onTermination = { _ in ended() }
        }
        return stream
    }

    private func subscribe(
        _ rules: [MatchRule], _ sink: Subscription.Sink,
        onTermination: (@escaping @Sendable () -> Void) -> Void
    ) async throws(DBusError) {
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        let subscription = Subscription(rules: rules, sink: sink)
        subscriptions[id] = subscription
        onTermination { [weak self, loop] in
            loop.execute { [weak self] in self?.assumeIsolated { $0.unsubscribe(id) } }
        }
        do {
            try await trackOwners(for: rules)
            for rule in rules {
                _ = try await callDaemon("AddMatch", [.string(rule.description)])
            }
        } catch {
            subscriptions.removeValue(forKey: id)
            subscription.finish()
            throw error
        }
    }

    /// Calls `handler` on the loop, synchronously, for every signal matching
    /// any of `rules`, in the order signals arrive. The rules are installed
    /// on the bus before this returns. Returns a token for
    /// `removeSignalHandler`.
    public func addSignalHandler(
        matchingAny rules: [MatchRule], _ handler: @escaping @Sendable (Message) -> Void
    ) async throws(DBusError) -> Int {
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        signalHandlers[id] = (rules, handler)
        do {
            try await trackOwners(for: rules)
            for rule in rules {
                _ = try await callDaemon("AddMatch", [.string(rule.description)])
            }
        } catch {
            signalHandlers[id] = nil
            throw error
        }
        return id
    }

    /// `addSignalHandler` for code already on the loop, which cannot wait:
    /// the handler is in place at once and its AddMatch calls are on their
    /// way, ahead of anything sent after this. Only for rules whose senders
    /// an earlier `addSignalHandler` tracks (the owner of a name the bus has
    /// not told about admits nothing). Rules the bus refuses are logged by
    /// nobody: the handler then hears only what other rules route here.
    public func addSignalHandlerNow(
        matchingAny rules: [MatchRule], _ handler: @escaping @Sendable (Message) -> Void
    ) -> Int {
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        signalHandlers[id] = (rules, handler)
        for rule in rules {
            startCall(destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "AddMatch",
                      [.string(rule.description)], timeout: .seconds(5)) { _ in }
        }
        return id
    }

    /// `removeSignalHandler` for code on the loop: the handler hears nothing
    /// more from now on (what the bus still routes under its rules is
    /// dropped, unless another handler's rules admit it) and its RemoveMatch
    /// calls are on their way.
    public func removeSignalHandlerNow(_ id: Int) {
        guard let entry = signalHandlers.removeValue(forKey: id), isConnected else { return }
        for rule in entry.rules {
            startCall(destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "RemoveMatch",
                      [.string(rule.description)], timeout: .seconds(5)) { _ in }
        }
    }

    /// Stops the handler and removes its rules from the bus. When this
    /// returns, every signal the bus routed to this connection before it
    /// removed the rules has been handed to the handler: the bus answers
    /// RemoveMatch after what it queued for us earlier, and replies and
    /// signals are dispatched in arrival order.
    /// Not cancellable: a stopping daemon calls it from a cancelled task.
    public func removeSignalHandler(_ id: Int) async {
        guard let entry = signalHandlers[id], isConnected else { return }
        for rule in entry.rules {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                startCall(
                    destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "RemoveMatch",
                    [.string(rule.description)], timeout: .seconds(5)
                ) { _ in continuation.resume() }
            }
        }
        signalHandlers[id] = nil
    }

    /// Lets `interceptor` see each incoming signal before it is decoded and
    /// consume it (return true): the fast path for a hot signal.
    public func setSignalInterceptor(_ interceptor: (@Sendable (RawSignal) -> Bool)?) {
        connection.signalInterceptor = interceptor
    }

    private func unsubscribe(_ id: Int) {
        guard let subscription = subscriptions.removeValue(forKey: id), isConnected else { return }
        for rule in subscription.rules {
            try? callNoReply(
                destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "RemoveMatch",
                [.string(rule.description)]
            )
        }
    }

    // MARK: Names

    /// Takes a well-known name; fails if another connection owns it or the
    /// bus policy forbids it (`AccessDenied`).
    public func requestName(_ name: String) async throws(DBusError) {
        try NameCheck.busName(name)
        let reply = try await callDaemon("RequestName", [.string(name), .uint32(CDBUS_NAME_FLAG_DO_NOT_QUEUE)])
        let code = reply.first?.int64 ?? 0
        guard code == Int64(CDBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER)
            || code == Int64(CDBUS_REQUEST_NAME_REPLY_ALREADY_OWNER)
        else {
            throw .remote(name: DBusErrorName.failed, message: "the name \(name) is owned by another connection")
        }
    }

    public func releaseName(_ name: String) async throws(DBusError) {
        try NameCheck.busName(name)
        _ = try await callDaemon("ReleaseName", [.string(name)])
    }

    /// The unique name owning `name`, or nil when nobody does.
    public func nameOwner(of name: String) async throws(DBusError) -> String? {
        try NameCheck.busName(name)
        do {
            return try await callDaemon("GetNameOwner", [.string(name)]).first?.string
        } catch .remote(let errorName, _) where errorName == DBusErrorName.nameHasNoOwner {
            return nil
        }
    }

    /// The process ID of the connection that owns `name` (a unique or a
    /// well-known name), as the bus daemon knows it; nil when nobody owns it.
    /// The bus answers this itself, so it works when the owner does not.
    public func processID(ofOwnerOf name: String) async throws(DBusError) -> UInt32? {
        try NameCheck.busName(name)
        do {
            return try await callDaemon("GetConnectionUnixProcessID", [.string(name)]).first?.int64
                .flatMap { UInt32(exactly: $0) }
        } catch .remote(let errorName, _) where errorName == DBusErrorName.nameHasNoOwner {
            return nil
        }
    }

    /// The owner of `name` now, then every change (nil while nobody owns it).
    /// Repeated values are possible around the first one; consumers compare.
    public func nameOwnerChanges(of name: String) async throws(DBusError) -> AsyncStream<String?> {
        let changes = try await signals(
            matching: MatchRule(
                sender: Bus.daemonName, interface: Bus.daemonName, member: "NameOwnerChanged",
                path: Bus.daemonPath, arg0: name
            )
        )
        let current = try await nameOwner(of: name)
        let (stream, continuation) = AsyncStream.makeStream(of: String?.self, bufferingPolicy: .bufferingNewest(64))
        continuation.yield(current)
        let forwarder = Task {
            for await signal in changes {
                let owner = signal.body.count >= 3 ? signal.body[2].string : nil
                continuation.yield(owner?.isEmpty == false ? owner : nil)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in forwarder.cancel() }
        return stream
    }

    // MARK: Remote properties

    public func getProperty(destination: String, path: ObjectPath, interface: String, name: String)
        async throws(DBusError) -> DBusValue
    {
        let reply = try await call(
            destination: destination, path: path, interface: StandardInterface.properties, method: "Get",
            [.string(interface), .string(name)]
        )
        guard let value = reply.first else { throw .malformed("empty Get reply") }
        return value.unwrapped
    }

    public func getAllProperties(
        destination: String, path: ObjectPath, interface: String, timeout: Duration = defaultTimeout
    ) async throws(DBusError) -> [String: DBusValue] {
        let reply = try await call(
            destination: destination, path: path, interface: StandardInterface.properties, method: "GetAll",
            [.string(interface)], timeout: timeout
        )
        guard let properties = reply.first?.stringKeyedDictionary else { throw .malformed("GetAll reply") }
        return properties.mapValues(\.unwrapped)
    }

    public func setRemoteProperty(
        destination: String, path: ObjectPath, interface: String, name: String, value: DBusValue,
        timeout: Duration = defaultTimeout
    ) async throws(DBusError) {
        _ = try await call(
            destination: destination, path: path, interface: StandardInterface.properties, method: "Set",
            [.string(interface), .string(name), .variant(value)], timeout: timeout
        )
    }

    // MARK: Exporting objects

    /// Serves org.freedesktop.DBus.ObjectManager at `path` for every object
    /// below it, and announces objects exported later with InterfacesAdded.
    public func enableObjectManager(at path: ObjectPath) {
        registry.managerPaths.insert(path)
    }

    /// Exports interfaces on an object. Under an object manager, the new
    /// interfaces are announced in one InterfacesAdded signal; a new object's
    /// announcement also lists the standard interfaces, as BlueZ's does.
    public func export(_ path: ObjectPath, _ interfaces: [ExportedInterface]) throws(DBusError) {
        for interface in interfaces { try NameCheck.interface(interface.name) }
        let isNew = registry.objects[path] == nil
        registry.add(path, interfaces)
        guard let manager = registry.manager(for: path) else { return }
        var names = interfaces.map(\.name)
        if isNew { names += [StandardInterface.introspectable, StandardInterface.properties] }
        try emit(
            path: manager, interface: StandardInterface.objectManager, member: "InterfacesAdded",
            [.objectPath(path), registry.interfacesAndProperties(path, only: names)]
        )
    }

    /// Removes interfaces (all of them if `interfaces` is nil) and announces
    /// it with InterfacesRemoved.
    public func unexport(_ path: ObjectPath, interfaces: [String]? = nil) throws(DBusError) {
        let removed = unexportUnannounced(path, interfaces: interfaces)
        guard !removed.isEmpty else { return }
        try announceRemoval(of: path, interfaces: removed)
    }

    /// Drops `path`'s interfaces (all, or `interfaces`) now and returns what
    /// InterfacesRemoved would name, for `announceRemoval` to send later (bluetoothd's
    /// RemoveDevice answers before it announces the removal); empty when
    /// nothing was exported there.
    public func unexportUnannounced(_ path: ObjectPath, interfaces: [String]? = nil) -> [String] {
        var removed = registry.remove(path, interfaces: interfaces)
        guard !removed.isEmpty, registry.manager(for: path) != nil else { return [] }
        if registry.objects[path] == nil {
            removed += [StandardInterface.introspectable, StandardInterface.properties]
        }
        return removed
    }

    /// The InterfacesRemoved `unexportUnannounced` held back.
    public func announceRemoval(of path: ObjectPath, interfaces: [String]) throws(DBusError) {
        guard let manager = registry.manager(for: path) else { return }
        try emit(
            path: manager, interface: StandardInterface.objectManager, member: "InterfacesRemoved",
            [.objectPath(path), .strings(interfaces)]
        )
    }

    /// Drops every exported object without announcing it, as a crashing
    /// process would.
    public func unexportAllSilently() {
        let managers = registry.managerPaths
        registry = ObjectRegistry()
        registry.managerPaths = managers
    }

    public func isExported(_ path: ObjectPath) -> Bool { registry.objects[path] != nil }

    public func property(_ path: ObjectPath, _ interface: String, _ name: String) -> DBusValue? {
        registry.interface(path, interface)?.properties[name]
    }

    /// Changes exported properties and emits one PropertiesChanged for them.
    /// `invalidated` names properties that no longer have a value (BlueZ does
    /// this with RSSI when discovery stops).
    public func setProperties(
        _ path: ObjectPath, _ interface: String, _ changes: [String: DBusValue], invalidated: [String] = [],
        emitSignal: Bool = true
    ) throws(DBusError) {
        guard registry.interface(path, interface) != nil else {
            throw .invalidArgument("\(path) does not export \(interface)")
        }
        for (name, value) in changes {
            _ = registry.update(path, interface, property: name, value: value)
        }
        for name in invalidated {
            registry.removeProperty(path, interface, property: name)
        }
        guard emitSignal else { return }
        try emit(
            path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
            [.string(interface), .vardict(changes), .strings(invalidated)]
        )
    }

    // MARK: Routing incoming messages

    private func route(_ message: Message) {
        switch message.kind {
        case .signal:
            // Before the rules are applied: the new owner's own signals that
            // follow this one are believed, the old owner's no longer.
            noteOwnerChange(message)
            let owner = { (name: String) in self.currentOwner(of: name) }
            for (_, entry) in signalHandlers where entry.rules.contains(where: { $0.matches(message, owner: owner) }) {
                entry.handler(message)
            }
            for (id, subscription) in subscriptions
            where subscription.rules.contains(where: { $0.matches(message, owner: owner) }) {
                deliver(message, to: id, subscription)
            }
        case .methodCall:
            serve(message)
        default:
            break
        }
    }

    private func deliver(_ message: Message, to id: Int, _ subscription: Subscription) {
        switch subscription.sink {
        case .messages(let continuation):
            if case .dropped = continuation.yield(message) { droppedSignals += 1 }
        case .deliveries(let continuation, var lost):
            if lost > 0, case .dropped = continuation.yield(.lost(lost)) {
                lost += 1
            } else {
                lost = 0
                if case .dropped = continuation.yield(.signal(message)) { lost = 1 }
            }
            if lost > 0 { droppedSignals += 1 }
            subscriptions[id]?.sink = .deliveries(continuation, lost: lost)
        }
    }

    private func serve(_ call: Message) {
        guard let path = call.path, let member = call.member else { return }
        switch (call.interface, member) {
        case (StandardInterface.peer?, "Ping"):
            reply(to: call, .success([]))
        case (StandardInterface.introspectable?, "Introspect"), (nil, "Introspect"):
            if registry.hasNode(path) || path == .root {
                reply(to: call, .success([.string(registry.introspect(path))]))
            } else {
                reply(to: call, .failure(.remote(name: DBusErrorName.unknownObject, message: "No such object \(path)")))
            }
        case (StandardInterface.properties?, _):
            serveProperties(call, path: path, member: member)
        case (StandardInterface.objectManager?, "GetManagedObjects") where registry.managerPaths.contains(path):
            reply(to: call, .success([registry.managedObjects(below: path)]))
        default:
            serveExported(call, path: path, member: member)
        }
    }

    private func serveExported(_ call: Message, path: ObjectPath, member: String) {
        let method: ExportedInterface.Method
        switch exportedMethod(for: call, path: path, member: member) {
        case .success(let found): method = found
        case .failure(let refusal):
            reply(to: call, .failure(.remote(name: refusal.name, message: refusal.text)))
            return
        }
        let handler = method.handler
        let request = MethodCall(message: call)
        startHandler(for: call)
        run { [weak self] in
            let result: Result<[DBusValue], DBusError>
            do { result = .success(try await handler(request)) } catch { result = .failure(Bus.replyError(error)) }
            await self?.handlerEnded(for: call, result)
        }
    }

    private func startHandler(for call: Message) {
        callsInFlight[call.sender ?? "", default: 0] += 1
    }

    private func handlerEnded(for call: Message, _ result: Result<[DBusValue], DBusError>) {
        let caller = call.sender ?? ""
        if let running = callsInFlight[caller] { callsInFlight[caller] = running > 1 ? running - 1 : nil }
        reply(to: call, result)
    }

    /// Runs an exported method's handler: as a child task of
    /// `serveMethodCalls()` when someone runs it, else in a task of its own.
    private func run(_ work: @escaping @Sendable () async -> Void) {
        if let methodCalls, case .enqueued = methodCalls.yield(work) { return }
        // On the loop, which runs tasks in the order they were made: each
        // handler starts (up to its first suspension) in the order the calls
        // arrived, as a single-threaded service (bluetoothd) serves them. On
        // the global executor two calls that arrive together could start in
        // either order.
        Task(executorPreference: loop) { await work() }
    }

    /// Runs the handlers of incoming method calls (exported methods and
    /// property setters) as child tasks of the caller, until it is cancelled
    /// or the connection closes; then waits for the handlers still running.
    /// A daemon runs this inside its task group so that no handler outlives
    /// it. Without it, each handler runs in an unstructured task.
    public func serveMethodCalls() async {
        let (calls, continuation) = AsyncStream.makeStream(of: (@Sendable () async -> Void).self)
        guard isConnected else { return }
        methodCalls = continuation
        await withDiscardingTaskGroup { group in
            for await work in calls {
                group.addTask { await work() }
            }
        }
        methodCalls = nil
    }

    private func serveProperties(_ call: Message, path: ObjectPath, member: String) {
        let args = call.body
        let interfaceName = args.first?.string ?? ""
        guard let interface = registry.interface(path, interfaceName) else {
            let name = registry.objects[path] == nil ? DBusErrorName.unknownObject : DBusErrorName.unknownInterface
            reply(to: call, .failure(.remote(name: name, message: "No such interface '\(interfaceName)'")))
            return
        }
        switch (member, call.signature) {
        case ("Get", "ss"):
            let name = args[1].string ?? ""
            if let value = interface.currentProperties[name] {
                reply(to: call, .success([.variant(value)]))
            } else {
                reply(to: call, .failure(.remote(name: DBusErrorName.invalidArgs, message: "No such property '\(name)'")))
            }
        case ("GetAll", "s"):
            reply(to: call, .success([.vardict(interface.currentProperties)]))
        case ("Set", "ssv"):
            let name = args[1].string ?? ""
            guard interface.properties[name] != nil else {
                reply(to: call, .failure(.remote(name: DBusErrorName.invalidArgs, message: "No such property '\(name)'")))
                return
            }
            guard interface.writable.contains(name), let setter = interface.setter else {
                reply(to: call, .failure(.remote(name: DBusErrorName.propertyReadOnly, message: "Property '\(name)' is not writable")))
                return
            }
            let value = args[2].unwrapped
            startHandler(for: call)
            run { [weak self] in
                let result: Result<[DBusValue], DBusError>
                do {
                    try await setter(name, value)
                    result = .success([])
                } catch {
                    result = .failure(Bus.replyError(error))
                }
                await self?.handlerEnded(for: call, result)
            }
        default:
            reply(to: call, .failure(.remote(name: DBusErrorName.unknownMethod, message: "Unknown method \(member)")))
        }
    }

    private static func replyError(_ error: any Error) -> DBusError {
        (error as? DBusError) ?? .remote(name: DBusErrorName.failed, message: String(describing: error))
    }

    private func reply(to call: Message, _ result: Result<[DBusValue], DBusError>) {
        guard !call.noReplyExpected, isConnected else { return }
        do {
            switch result {
            case .success(let body):
                try connection.send(OutgoingMessage.methodReturn(to: call, body: body))
            case .failure(let error):
                try connection.send(OutgoingMessage.error(to: call, name: error.name, text: error.message))
            }
        } catch {
            // The body could not be marshalled: still answer, so the caller does not hang.
            if let fallback = try? OutgoingMessage.error(to: call, name: DBusErrorName.failed, text: error.description) {
                try? connection.send(fallback)
            }
        }
    }
}

/// Lets a cancellation handler reach the pending call; touched only on the queue.
private final class CallHandle: @unchecked Sendable {
    var pending: PendingCall?
}
