import CDBus
import CEventLoop
import EventLoop
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The libdbus side of one bus connection, confined to its event loop.
///
/// Invariants:
/// - every method here runs on `loop`'s thread (the `Bus` actor's executor
///   is the loop, and libdbus's watches and timeouts are the loop's
///   descriptors and timers), so libdbus is never entered concurrently and
///   never blocks;
/// - an idle connection sleeps in the loop's epoll_wait: no polling;
/// - a readable socket is drained in one turn (every complete message read
///   and dispatched), so a burst costs one wake-up, not one per message;
/// - once `close()` has run, `raw` is nil and every entry point fails with
///   `.disconnected`;
/// - every call in `inFlight` has a timer on the loop, and leaves `inFlight`
///   exactly once: by its reply, its timer, a cancel or `close()`, whichever
///   comes first; its completion runs then, and only then.
final class Connection: @unchecked Sendable {
    let loop: EventLoop
    private(set) var raw: OpaquePointer?
    private var watches: [OpaquePointer: EventLoop.WatchID] = [:]
    private var timers: [OpaquePointer: EventLoop.TimerID] = [:]
    /// libdbus's timeouts between its add and remove callbacks.
    private var timeoutsAdded: Set<OpaquePointer> = []
    private var dispatchScheduled = false
    /// Calls awaiting a reply, by the serial their reply will name; failed
    /// with `.disconnected` on close.
    private var inFlight: [UInt32: PendingCall] = [:]
    /// Called on the loop for every incoming signal and method call.
    var onMessage: ((Message) -> Void)?
    /// Called on the loop with each incoming signal before it is decoded;
    /// returning true consumes it (a fast path for hot signals).
    var signalInterceptor: ((RawSignal) -> Bool)?
    /// Called on the loop with each incoming signal the interceptor did not
    /// take, before it is decoded: false drops it unread.
    var signalAdmission: ((RawSignal) -> Bool)?
    /// Called on the loop with each incoming method call's header (its body
    /// not decoded): a refusal is answered with that error (unless the caller
    /// asked for no reply) and the body is never read.
    var callAdmission: ((Message) -> CallRefusal?)?
    /// Signals dropped unread because no match rule admitted them, and
    /// method calls refused from their header alone: counted on the loop,
    /// read from anywhere (the metrics exporter runs on another thread).
    let signalsDroppedUnread = Atomic<Int>(0)
    let callsRefusedUnread = Atomic<Int>(0)
    /// Called once on the loop when the bus goes away or `close()` runs.
    var onClose: (() -> Void)?

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Opens a private connection. Connecting a Unix socket does not block;
    /// authentication and Hello run later through the main loop.
    func open(address: String) throws(DBusError) {
        loop.checkIsolated()
        guard NameValidation.isValidUTF8(address) else { throw .invalidArgument("bus address") }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let connection = dbus_connection_open_private(address, &error) else {
            let why = error.message.map { String(cString: $0) } ?? "unknown error"
            throw .connectFailed("\(address): \(why)")
        }
        raw = connection
        dbus_connection_set_exit_on_disconnect(connection, 0)
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard dbus_connection_set_watch_functions(
            connection, Connection.addWatch, Connection.removeWatch, Connection.toggleWatch, me, nil) != 0,
            dbus_connection_set_timeout_functions(
                connection, Connection.addTimeout, Connection.removeTimeout, Connection.toggleTimeout, me, nil) != 0,
            dbus_connection_add_filter(connection, Connection.filter, me, nil) != 0
        else {
            close()
            throw .outOfMemory
        }
        dbus_connection_set_dispatch_status_function(connection, Connection.dispatchStatusChanged, me, nil)
        dbus_connection_set_wakeup_main_function(connection, Connection.wakeUp, me, nil)
    }

    /// Closes the connection and releases every source. Safe to call twice.
    func close() {
        loop.checkIsolated()
        guard let connection = raw else { return }
        raw = nil
        // Detach our callbacks before closing so libdbus does not call back
        // into a half-torn-down object.
        let me = Unmanaged.passUnretained(self).toOpaque()
        dbus_connection_remove_filter(connection, Connection.filter, me)
        dbus_connection_set_dispatch_status_function(connection, nil, nil, nil)
        dbus_connection_set_wakeup_main_function(connection, nil, nil, nil)
        dbus_connection_close(connection)
        dbus_connection_set_watch_functions(connection, nil, nil, nil, nil, nil)
        dbus_connection_set_timeout_functions(connection, nil, nil, nil, nil, nil)
        // In the order they were sent, so what the callers see does not
        // depend on the dictionary's order.
        let abandoned = inFlight.values.sorted { $0.serial < $1.serial }
        inFlight.removeAll()
        for pending in abandoned {
            loop.cancelTimer(pending.timeout)
            pending.finish(.failure(.disconnected))
        }
        for (_, watch) in watches { loop.removeWatch(watch) }
        watches.removeAll()
        for (_, timer) in timers { loop.cancelTimer(timer) }
        timers.removeAll()
        timeoutsAdded.removeAll()
        dbus_connection_unref(connection)
        let closeHandler = onClose
        onClose = nil
        onMessage = nil
        closeHandler?()
    }

    var isOpen: Bool { raw != nil }

    // MARK: Sending

    func send(_ message: OutgoingMessage) throws(DBusError) {
        guard let connection = raw else { throw .disconnected }
        guard dbus_connection_get_is_connected(connection) != 0 else { throw .disconnected }
        try checkCanSend(message, on: connection)
        guard dbus_connection_send(connection, message.raw, nil) != 0 else { throw .outOfMemory }
    }

    /// Whether file descriptors can travel on this connection: both ends
    /// must be on a Unix socket and have agreed to pass them while
    /// authenticating.
    var canPassUnixFDs: Bool {
        guard let connection = raw else { return false }
        return dbus_connection_can_send_type(connection, CDBUS_TYPE_UNIX_FD) != 0
    }

    /// libdbus would drop the descriptors of a message on a connection that
    /// cannot pass them; refuse it instead.
    private func checkCanSend(_ message: OutgoingMessage, on connection: OpaquePointer) throws(DBusError) {
        guard message.carriesUnixFDs, dbus_connection_can_send_type(connection, CDBUS_TYPE_UNIX_FD) == 0 else { return }
        throw .invalidArgument("this bus connection cannot pass file descriptors")
    }

    /// Sends a method call; `completion` runs on the loop exactly once, with
    /// the reply, an error reply, or a local failure (timeout, disconnect).
    /// Returns a handle that can cancel the call.
    ///
    /// The reply is matched by its serial here, not through a libdbus
    /// pending call: libdbus builds the `NoReply` error it would deliver on a
    /// timeout when the call is sent, and tracks the call in hash tables and
    /// a timeout of its own, about 19,000 instructions a call; the daemon's
    /// answered keep-alive pays that every few seconds (docs/development.md,
    /// idle CPU). The bus daemon passes on only replies to calls it saw
    /// (a reply no call asked for is refused there), as libdbus assumes too.
    func call(
        _ message: OutgoingMessage, timeout: Duration, completion: @escaping (Result<Message, DBusError>) -> Void
    ) -> PendingCall? {
        guard let connection = raw, dbus_connection_get_is_connected(connection) != 0 else {
            completion(.failure(.disconnected))
            return nil
        }
        do {
            try checkCanSend(message, on: connection)
        } catch {
            completion(.failure(error))
            return nil
        }
        var serial: UInt32 = 0
        guard dbus_connection_send(connection, message.raw, &serial) != 0 else {
            completion(.failure(.outOfMemory))
            return nil
        }
        // Replies are read and dispatched only on this loop, so none can
        // arrive before the call is in `inFlight`.
        let timer = loop.schedule(after: timeout) { [weak self] in
            self?.settle(serial) { $0.finish(.failure(.timeout)) }
        }
        let pending = PendingCall(serial: serial, timeout: timer, connection: self, completion: completion)
        inFlight[serial] = pending
        return pending
    }

    /// Takes the call awaiting `serial` out of `inFlight`, stops its timer
    /// and hands it to `outcome`; nothing if it has already been settled.
    fileprivate func settle(_ serial: UInt32, _ outcome: (PendingCall) -> Void) {
        guard let pending = inFlight.removeValue(forKey: serial) else { return }
        loop.cancelTimer(pending.timeout)
        outcome(pending)
    }

    // MARK: Dispatching

    private func scheduleDispatch() {
        guard !dispatchScheduled else { return }
        dispatchScheduled = true
        loop.execute { [self] in
            dispatchScheduled = false
            dispatchPending()
        }
    }

    /// Reads everything the socket holds and dispatches it. libdbus reads at
    /// most 2 KiB per `dbus_watch_handle`, so a burst of signals would
    /// otherwise take one loop turn (and under load moderation, one sleep)
    /// per 2 KiB.
    private func drainReadable(_ watch: OpaquePointer, fd: Int32) {
        var rounds = 0
        repeat {
            dbus_watch_handle(watch, DBUS_WATCH_READABLE.rawValue)
            dispatchPending()
            rounds += 1
        } while raw != nil && watches[watch] != nil && rounds < 256 && ceventloop_pending_bytes(fd) > 0
    }

    /// Dispatches queued messages. A bounded batch per turn keeps other work
    /// on the loop (method calls, timers) from starving under a flood.
    private func dispatchPending() {
        var budget = 512
        while let connection = raw, budget > 0,
              dbus_connection_get_dispatch_status(connection) == DBUS_DISPATCH_DATA_REMAINS
        {
            dbus_connection_dispatch(connection)
            budget -= 1
        }
        if let connection = raw, dbus_connection_get_dispatch_status(connection) == DBUS_DISPATCH_DATA_REMAINS {
            scheduleDispatch()
        }
    }

    private func handle(_ rawMessage: OpaquePointer) -> DBusHandlerResult {
        let type = dbus_message_get_type(rawMessage)
        if type == CDBUS_MESSAGE_TYPE_METHOD_RETURN || type == CDBUS_MESSAGE_TYPE_ERROR {
            // A reply to a call that already timed out or was cancelled is dropped.
            settle(dbus_message_get_reply_serial(rawMessage)) { $0.complete(with: rawMessage) }
            return DBUS_HANDLER_RESULT_HANDLED
        }
        if type == CDBUS_MESSAGE_TYPE_SIGNAL {
            let signal = RawSignal(raw: rawMessage)
            if signal.isLocal {
                // The peer hung up. Defer the teardown: we are inside dbus_connection_dispatch.
                loop.execute { [self] in close() }
                return DBUS_HANDLER_RESULT_HANDLED
            }
            if let signalInterceptor, signalInterceptor(signal) {
                return DBUS_HANDLER_RESULT_HANDLED
            }
            if let signalAdmission, !signalAdmission(signal) {
                // Nobody asked for it, or it is not from whom it claims: not
                // decoded, so a flood of large unicast signals costs little here.
                signalsDroppedUnread.add(1, ordering: .relaxed)
                return DBUS_HANDLER_RESULT_HANDLED
            }
        } else if type == CDBUS_MESSAGE_TYPE_METHOD_CALL, let callAdmission {
            let header = Message.header(of: rawMessage, kind: .methodCall)
            if let refusal = callAdmission(header) {
                callsRefusedUnread.add(1, ordering: .relaxed)
                if !header.noReplyExpected,
                   let reply = try? OutgoingMessage.error(to: header, name: refusal.name, text: refusal.text)
                {
                    try? send(reply)
                }
                return DBUS_HANDLER_RESULT_HANDLED
            }
        }
        guard type == CDBUS_MESSAGE_TYPE_SIGNAL || type == CDBUS_MESSAGE_TYPE_METHOD_CALL else {
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
        guard case let (message, bodyError)? = Message.copy(from: rawMessage) else {
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
        if let bodyError, message.kind == .methodCall, !message.noReplyExpected,
           let reply = try? OutgoingMessage.error(to: message, name: DBusErrorName.invalidArgs, text: bodyError.description)
        {
            try? send(reply)
            return DBUS_HANDLER_RESULT_HANDLED
        }
        onMessage?(message)
        return DBUS_HANDLER_RESULT_HANDLED
    }

    // MARK: libdbus callbacks (all run on the loop, inside libdbus calls)

    private static func from(_ data: UnsafeMutableRawPointer?) -> Connection? {
        data.map { Unmanaged<Connection>.fromOpaque($0).takeUnretainedValue() }
    }

    private static let filter: DBusHandleMessageFunction = { _, message, data in
        guard let message, let connection = from(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        return connection.handle(message)
    }

    private static let dispatchStatusChanged: DBusDispatchStatusFunction = { _, status, data in
        if status == DBUS_DISPATCH_DATA_REMAINS { from(data)?.scheduleDispatch() }
    }

    private static let wakeUp: DBusWakeupMainFunction = { data in
        from(data)?.scheduleDispatch()
    }

    private static let addWatch: DBusAddWatchFunction = { watch, data in
        guard let watch, let connection = from(data) else { return 0 }
        connection.addWatch(watch)
        return 1
    }

    private static let removeWatch: DBusRemoveWatchFunction = { watch, data in
        guard let watch, let connection = from(data), let id = connection.watches.removeValue(forKey: watch) else { return }
        connection.loop.removeWatch(id)
    }

    private static let toggleWatch: DBusWatchToggledFunction = { watch, data in
        guard let watch, let connection = from(data), let id = connection.watches[watch] else { return }
        connection.loop.setInterest(id, interest(of: watch))
    }

    private static let addTimeout: DBusAddTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return 0 }
        connection.timeoutsAdded.insert(timeout)
        connection.armTimeout(timeout)
        return 1
    }

    private static let removeTimeout: DBusRemoveTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return }
        connection.timeoutsAdded.remove(timeout)
        if let id = connection.timers.removeValue(forKey: timeout) { connection.loop.cancelTimer(id) }
    }

    private static let toggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return }
        if let id = connection.timers.removeValue(forKey: timeout) { connection.loop.cancelTimer(id) }
        connection.armTimeout(timeout)
    }

    /// What the loop should watch `watch`'s descriptor for; nothing while libdbus has it disabled.
    private static func interest(of watch: OpaquePointer) -> EventLoop.Readiness {
        guard dbus_watch_get_enabled(watch) != 0 else { return [] }
        let flags = dbus_watch_get_flags(watch)
        var interest: EventLoop.Readiness = []
        if flags & DBUS_WATCH_READABLE.rawValue != 0 { interest.insert(.readable) }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { interest.insert(.writable) }
        return interest
    }

    private func addWatch(_ watch: OpaquePointer) {
        let fd = dbus_watch_get_unix_fd(watch)
        let id = loop.watch(fd, interest: Connection.interest(of: watch)) { [unowned self] ready in
            guard raw != nil, watches[watch] != nil else { return }
            if ready.contains(.readable) { drainReadable(watch, fd: fd) }
            // Reading may have found the hang-up: libdbus then removed (and
            // invalidated) this watch, and handling it again would abort.
            guard raw != nil, watches[watch] != nil else { return }
            var flags: UInt32 = 0
            if ready.contains(.writable) { flags |= DBUS_WATCH_WRITABLE.rawValue }
            if !ready.intersection(.hangup).isEmpty { flags |= DBUS_WATCH_HANGUP.rawValue | DBUS_WATCH_ERROR.rawValue }
            if flags != 0 {
                dbus_watch_handle(watch, flags)
                dispatchPending()
            }
        }
        watches[watch] = id
    }

    /// libdbus's timeouts repeat until removed or toggled.
    private func armTimeout(_ timeout: OpaquePointer) {
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let interval = Duration.milliseconds(Int64(max(1, dbus_timeout_get_interval(timeout))))
        timers[timeout] = loop.schedule(after: interval) { [unowned self] in
            guard raw != nil, timers[timeout] != nil else { return }
            timers[timeout] = nil
            dbus_timeout_handle(timeout)
            dispatchPending()
            // Still added and not re-armed by a toggle meanwhile: it fires again.
            if raw != nil, timers[timeout] == nil, timeoutsAdded.contains(timeout) { armTimeout(timeout) }
        }
    }
}

/// Why a method call is refused before its body is read: the D-Bus error it is answered with.
struct CallRefusal: Error, Equatable {
    var name: String
    var text: String
}

/// One method call in flight, known to its connection by the serial its
/// reply will name. Touched only on the connection's loop.
final class PendingCall {
    let serial: UInt32
    /// The loop timer that fails the call with `.timeout`.
    let timeout: EventLoop.TimerID
    private weak var connection: Connection?
    private var completion: ((Result<Message, DBusError>) -> Void)?

    init(
        serial: UInt32, timeout: EventLoop.TimerID, connection: Connection,
        completion: @escaping (Result<Message, DBusError>) -> Void
    ) {
        self.serial = serial
        self.timeout = timeout
        self.connection = connection
        self.completion = completion
    }

    /// Completes the call with `reply`, a method return or an error naming
    /// its serial (the connection has checked the type).
    func complete(with reply: OpaquePointer) {
        guard case let (message, bodyError)? = Message.copy(from: reply) else {
            finish(.failure(.malformed("the reply is of an unknown message type \(dbus_message_get_type(reply))")))
            return
        }
        if message.kind == .error {
            let name = message.errorName ?? DBusErrorName.failed
            if name == DBusErrorName.noReply {
                // The bus daemon's word for a callee that left without answering.
                finish(.failure(.timeout))
            } else if name == DBusErrorName.disconnected {
                finish(.failure(.disconnected))
            } else {
                finish(.failure(.remote(name: name, message: message.firstString)))
            }
        } else if let bodyError {
            finish(.failure(bodyError))
        } else {
            finish(.success(message))
        }
    }

    /// Abandons the call; the completion sees `error`, and a reply that
    /// comes later is dropped.
    func cancel(with error: DBusError) {
        guard let connection else { return finish(.failure(error)) }
        connection.settle(serial) { $0.finish(.failure(error)) }
    }

    /// Runs the completion, once: later calls do nothing.
    func finish(_ result: Result<Message, DBusError>) {
        let callback = completion
        completion = nil
        callback?(result)
    }
}
