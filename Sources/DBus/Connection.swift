import CDBus
import EventLoop
import Synchronization

/// The libdbus side of one bus connection, confined to its event loop.
///
/// Two transports carry its messages (`Transport`): libdbus's connection to
/// a bus daemon's socket, and a port on an `InProcessBusDaemon` (the
/// deterministic simulation, tests). Either way a message is a libdbus
/// `DBusMessage` and every incoming one goes through `handle(_:)`: replies
/// settled by serial, the local hang-up, the interceptor, admission, call
/// admission, decoding. Only sending and the socket's plumbing differ.
///
/// Invariants:
/// - every method here runs on `loop`'s thread (the `Bus` actor's executor
///   is the loop, and libdbus's watches and timeouts are the loop's
///   descriptors and timers), so libdbus is never entered concurrently and
///   never blocks;
/// - an idle connection sleeps in the loop's epoll_wait: no polling;
/// - a readable socket is drained in one turn (every complete message read
///   and dispatched), so a burst costs one wake-up, not one per message;
/// - once `close()` has run, `transport` is `.closed` and every entry point
///   fails with `.disconnected`;
/// - every call in `inFlight` has a timer on the loop, and leaves `inFlight`
///   exactly once: by its reply, its timer, a cancel or `close()`, whichever
///   comes first; its completion runs then, and only then.
final class Connection: @unchecked Sendable {
    let loop: EventLoop

    /// What carries the messages.
    enum Transport {
        /// Not opened yet, or closed.
        case closed
        /// libdbus's connection to a bus daemon's socket.
        case socket(OpaquePointer)
        /// A port on an in-process model of the bus daemon. It cannot pass
        /// file descriptors; the serials are set here (`InProcessBusPort.send`).
        case inProcess(InProcessBusPort)
    }
    private(set) var transport = Transport.closed
    /// libdbus's connection, while the transport is the socket.
    var raw: OpaquePointer? {
        if case .socket(let connection) = transport { return connection }
        return nil
    }
    // The socket's sources and dispatch state (Connection+Socket.swift).
    var watches: [OpaquePointer: EventLoop.WatchID] = [:]
    var timers: [OpaquePointer: EventLoop.TimerID] = [:]
    /// libdbus's timeouts between its add and remove callbacks.
    var timeoutsAdded: Set<OpaquePointer> = []
    var dispatchScheduled = false
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
        transport = .socket(connection)
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

    /// Opens a connection to `daemon`, in this process, on this loop or
    /// another of the daemon's thread (the simulation's virtual loops, all
    /// driven by one thread); the caller says Hello next, as on a socket.
    func open(inProcess daemon: InProcessBusDaemon, processID: UInt32) throws(DBusError) {
        loop.checkIsolated()
        guard daemon.loop.inLoop else {
            throw .connectFailed("an in-process bus daemon serves connections on loops of its own thread only")
        }
        let accepted = daemon.assumeIsolated { $0.accept(self, processID: processID) }
        transport = .inProcess(try accepted.get())
    }

    /// Closes the connection and releases every source. Safe to call twice.
    func close() {
        loop.checkIsolated()
        let closing = transport
        switch closing {
        case .closed:
            return
        case .socket(let connection):
            transport = .closed
            // Detach our callbacks before closing so libdbus does not call back
            // into a half-torn-down object.
            let me = Unmanaged.passUnretained(self).toOpaque()
            dbus_connection_remove_filter(connection, Connection.filter, me)
            dbus_connection_set_dispatch_status_function(connection, nil, nil, nil)
            dbus_connection_set_wakeup_main_function(connection, nil, nil, nil)
            dbus_connection_close(connection)
            dbus_connection_set_watch_functions(connection, nil, nil, nil, nil, nil)
            dbus_connection_set_timeout_functions(connection, nil, nil, nil, nil, nil)
        case .inProcess(let port):
            transport = .closed
            // The daemon sees the hang-up now, as dbus-daemon sees a socket close.
            port.clientClosed()
        }
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
        if case .socket(let connection) = closing { dbus_connection_unref(connection) }
        let closeHandler = onClose
        onClose = nil
        onMessage = nil
        closeHandler?()
    }

    var isOpen: Bool {
        if case .closed = transport { return false }
        return true
    }

    /// Tells libdbus the unique name the bus daemon gave in its Hello reply
    /// (an in-process port has it from the daemon already).
    func setUniqueName(_ name: String) {
        if case .socket(let connection) = transport { _ = dbus_bus_set_unique_name(connection, name) }
    }

    // MARK: Sending

    func send(_ message: OutgoingMessage) throws(DBusError) {
        switch transport {
        case .socket(let connection):
            guard dbus_connection_get_is_connected(connection) != 0 else { throw .disconnected }
            try checkCanSend(message)
            guard dbus_connection_send(connection, message.raw, nil) != 0 else { throw .outOfMemory }
        case .inProcess(let port):
            try checkCanSend(message)
            _ = try port.send(message)
        case .closed:
            throw .disconnected
        }
    }

    /// Whether file descriptors can travel on this connection: both ends
    /// must be on a Unix socket and have agreed to pass them while
    /// authenticating. Never on an in-process port, whose messages are not
    /// copied through a socket (the daemon then uses StartNotify, not
    /// AcquireNotify).
    var canPassUnixFDs: Bool {
        guard case .socket(let connection) = transport else { return false }
        return dbus_connection_can_send_type(connection, CDBUS_TYPE_UNIX_FD) != 0
    }

    /// libdbus would drop the descriptors of a message on a connection that
    /// cannot pass them; refuse it instead.
    private func checkCanSend(_ message: OutgoingMessage) throws(DBusError) {
        guard message.carriesUnixFDs, !canPassUnixFDs else { return }
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
        var serial: UInt32 = 0
        do throws(DBusError) {
            switch transport {
            case .socket(let connection):
                guard dbus_connection_get_is_connected(connection) != 0 else { throw .disconnected }
                try checkCanSend(message)
                guard dbus_connection_send(connection, message.raw, &serial) != 0 else { throw .outOfMemory }
            case .inProcess(let port):
                try checkCanSend(message)
                serial = try port.send(message)
            case .closed:
                throw .disconnected
            }
        } catch {
            completion(.failure(error))
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
    func settle(_ serial: UInt32, _ outcome: (PendingCall) -> Void) {
        guard let pending = inFlight.removeValue(forKey: serial) else { return }
        loop.cancelTimer(pending.timeout)
        outcome(pending)
    }

    // MARK: Handling incoming messages

    /// A message an in-process port delivers, lent for this call: the same
    /// path as one libdbus dispatches.
    func receive(inProcess rawMessage: OpaquePointer) {
        _ = handle(rawMessage)
    }

    /// Every incoming message, on either transport.
    func handle(_ rawMessage: OpaquePointer) -> DBusHandlerResult {
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
}
