import CDBus
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The libdbus side of one bus connection, confined to its executor's queue.
///
/// Invariants:
/// - every method here runs on `executor.queue` (the `Bus` actor runs there,
///   and so do the DispatchSources that stand in for libdbus's watches and
///   timeouts), so libdbus is never entered concurrently and never blocks;
/// - libdbus's watch and timeout callbacks become DispatchSources, so an idle
///   connection sleeps in the kernel instead of polling;
/// - once `close()` has run, `raw` is nil and every entry point fails with
///   `.disconnected`.
final class Connection: @unchecked Sendable {
    let executor: DispatchQueueExecutor
    private(set) var raw: OpaquePointer?
    private var watches: [OpaquePointer: WatchSources] = [:]
    private var timers: [OpaquePointer: DispatchSourceTimer] = [:]
    private var dispatchScheduled = false
    /// Calls awaiting a reply, failed with `.disconnected` on close.
    private var inFlight: [ObjectIdentifier: PendingCall] = [:]
    /// Called on the queue for every incoming signal and method call.
    var onMessage: ((Message) -> Void)?
    /// Called once on the queue when the bus goes away or `close()` runs.
    var onClose: (() -> Void)?

    private var queue: DispatchQueue { executor.queue }

    init(executor: DispatchQueueExecutor) {
        self.executor = executor
    }

    /// Opens a private connection. Connecting a Unix socket does not block;
    /// authentication and Hello run later through the main loop.
    func open(address: String) throws(DBusError) {
        dispatchPrecondition(condition: .onQueue(queue))
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
        dispatchPrecondition(condition: .onQueue(queue))
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
        for (_, pending) in inFlight { pending.cancel(with: .disconnected) }
        inFlight.removeAll()
        for (_, sources) in watches { sources.cancel() }
        watches.removeAll()
        for (_, timer) in timers { timer.cancel() }
        timers.removeAll()
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
        guard dbus_connection_send(connection, message.raw, nil) != 0 else { throw .outOfMemory }
    }

    /// Sends a method call; `completion` runs on the queue exactly once, with
    /// the reply, an error reply, or a local failure (timeout, disconnect).
    /// Returns a handle that can cancel the call.
    func call(
        _ message: OutgoingMessage, timeout: Duration, completion: @escaping (Result<Message, DBusError>) -> Void
    ) -> PendingCall? {
        guard let connection = raw, dbus_connection_get_is_connected(connection) != 0 else {
            completion(.failure(.disconnected))
            return nil
        }
        let milliseconds = Connection.milliseconds(timeout)
        var pendingPointer: OpaquePointer?
        guard dbus_connection_send_with_reply(connection, message.raw, &pendingPointer, milliseconds) != 0 else {
            completion(.failure(.outOfMemory))
            return nil
        }
        guard let pendingPointer else {
            // libdbus returns no pending call when the connection is already gone.
            completion(.failure(.disconnected))
            return nil
        }
        var key: ObjectIdentifier?
        let pending = PendingCall(raw: pendingPointer) { [weak self] result in
            if let key { self?.inFlight.removeValue(forKey: key) }
            completion(result)
        }
        key = ObjectIdentifier(pending)
        inFlight[ObjectIdentifier(pending)] = pending
        let box = Unmanaged.passRetained(pending).toOpaque()
        guard dbus_pending_call_set_notify(pendingPointer, Connection.pendingCompleted, box, Connection.releasePending) != 0
        else {
            Unmanaged<PendingCall>.fromOpaque(box).release()
            pending.finish(.failure(.outOfMemory))
            return nil
        }
        // Replies are only read on this queue, so the call cannot have
        // completed between sending and setting the notify function; the
        // check keeps that assumption honest.
        if dbus_pending_call_get_completed(pendingPointer) != 0 {
            pending.complete()
        }
        return pending
    }

    private static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        let ms = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return Int32(clamping: max(1, ms))
    }

    // MARK: Dispatching

    private func scheduleDispatch() {
        guard !dispatchScheduled else { return }
        dispatchScheduled = true
        queue.async { [self] in
            dispatchScheduled = false
            dispatchPending()
        }
    }

    /// Dispatches queued messages. A bounded batch per turn keeps other work
    /// on the queue (method calls, timers) from starving under a flood.
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
        if type == CDBUS_MESSAGE_TYPE_SIGNAL,
           dbus_message_is_signal(rawMessage, "org.freedesktop.DBus.Local", "Disconnected") != 0
        {
            // The peer hung up. Defer the teardown: we are inside dbus_connection_dispatch.
            queue.async { [self] in close() }
            return DBUS_HANDLER_RESULT_HANDLED
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

    // MARK: libdbus callbacks (all run on the queue, inside libdbus calls)

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
        guard let watch, let connection = from(data) else { return }
        connection.watches.removeValue(forKey: watch)?.cancel()
    }

    private static let toggleWatch: DBusWatchToggledFunction = { watch, data in
        guard let watch, let connection = from(data) else { return }
        connection.watches[watch]?.setEnabled(dbus_watch_get_enabled(watch) != 0)
    }

    private static let addTimeout: DBusAddTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return 0 }
        connection.armTimeout(timeout)
        return 1
    }

    private static let removeTimeout: DBusRemoveTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return }
        connection.timers.removeValue(forKey: timeout)?.cancel()
    }

    private static let toggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return }
        connection.timers.removeValue(forKey: timeout)?.cancel()
        connection.armTimeout(timeout)
    }

    private static let pendingCompleted: DBusPendingCallNotifyFunction = { _, data in
        guard let data else { return }
        Unmanaged<PendingCall>.fromOpaque(data).takeUnretainedValue().complete()
    }

    private static let releasePending: DBusFreeFunction = { data in
        guard let data else { return }
        Unmanaged<PendingCall>.fromOpaque(data).release()
    }

    private func addWatch(_ watch: OpaquePointer) {
        let fd = dbus_watch_get_unix_fd(watch)
        let flags = dbus_watch_get_flags(watch)
        let sources = WatchSources(fd: fd, flags: flags, queue: queue) { [unowned self] readyFlags in
            guard raw != nil else { return }
            dbus_watch_handle(watch, readyFlags)
            dispatchPending()
        }
        watches[watch] = sources
        sources.setEnabled(dbus_watch_get_enabled(watch) != 0)
    }

    private func armTimeout(_ timeout: OpaquePointer) {
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let interval = DispatchTimeInterval.milliseconds(Int(max(1, dbus_timeout_get_interval(timeout))))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [unowned self] in
            guard raw != nil else { return }
            dbus_timeout_handle(timeout)
            dispatchPending()
        }
        timers[timeout] = timer
        timer.resume()
    }
}

/// The DispatchSources standing in for one libdbus watch (one per direction).
private final class WatchSources {
    private var sources: [DispatchSourceProtocol] = []
    private var enabled = false

    /// Each source watches its own duplicate of the socket, closed in the
    /// source's cancel handler. libdispatch requires a watched fd to stay
    /// open until then, but libdbus closes its socket right after removing a
    /// watch; a later connection given the same fd number was then registered
    /// against libdispatch's stale entry and never saw an event (its Hello
    /// timed out in about 1 % of connects).
    init(fd: Int32, flags: UInt32, queue: DispatchQueue, handler: @escaping (UInt32) -> Void) {
        if flags & DBUS_WATCH_READABLE.rawValue != 0 {
            let (watched, owned) = WatchSources.duplicate(fd)
            let source = DispatchSource.makeReadSource(fileDescriptor: watched, queue: queue)
            source.setEventHandler { handler(DBUS_WATCH_READABLE.rawValue) }
            if owned { source.setCancelHandler { _ = close(watched) } }
            sources.append(source)
        }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 {
            let (watched, owned) = WatchSources.duplicate(fd)
            let source = DispatchSource.makeWriteSource(fileDescriptor: watched, queue: queue)
            source.setEventHandler { handler(DBUS_WATCH_WRITABLE.rawValue) }
            if owned { source.setCancelHandler { _ = close(watched) } }
            sources.append(source)
        }
    }

    /// A duplicate of `fd` (owned: close it), or `fd` itself if dup fails.
    private static func duplicate(_ fd: Int32) -> (fd: Int32, owned: Bool) {
        let copy = dup(fd)
        return copy >= 0 ? (copy, true) : (fd, false)
    }

    /// Suspend and resume must balance; a source is created suspended.
    func setEnabled(_ on: Bool) {
        guard on != enabled else { return }
        enabled = on
        for source in sources {
            if on { source.resume() } else { source.suspend() }
        }
    }

    /// A suspended source must be resumed before it is released, or
    /// libdispatch traps; cancelling first guarantees no handler runs.
    func cancel() {
        for source in sources {
            source.cancel()
            if !enabled { source.resume() }
        }
        sources.removeAll()
    }
}

/// One method call in flight.
final class PendingCall {
    private var raw: OpaquePointer?
    private var completion: ((Result<Message, DBusError>) -> Void)?

    init(raw: OpaquePointer, completion: @escaping (Result<Message, DBusError>) -> Void) {
        self.raw = raw
        self.completion = completion
    }

    /// Called when libdbus has the reply (or made up a NoReply on timeout).
    func complete() {
        guard let raw, completion != nil else { return }
        guard let reply = dbus_pending_call_steal_reply(raw) else {
            finish(.failure(.disconnected))
            return
        }
        defer { dbus_message_unref(reply) }
        // libdbus completes a call with any message that names its serial, whatever its type.
        guard case let (message, bodyError)? = Message.copy(from: reply) else {
            finish(.failure(.malformed("the reply is of an unknown message type \(dbus_message_get_type(reply))")))
            return
        }
        if message.kind == .error {
            let name = message.errorName ?? DBusErrorName.failed
            if name == DBusErrorName.noReply {
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

    /// Abandons the call; the completion sees `error`.
    func cancel(with error: DBusError) {
        if let raw { dbus_pending_call_cancel(raw) }
        finish(.failure(error))
    }

    func finish(_ result: Result<Message, DBusError>) {
        let callback = completion
        completion = nil
        if let raw {
            self.raw = nil
            dbus_pending_call_unref(raw)
        }
        callback?(result)
    }
}
