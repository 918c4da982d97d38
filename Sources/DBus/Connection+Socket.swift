import CDBus
import CEventLoop
import EventLoop

/// The socket transport's plumbing: libdbus's watches and timeouts as the
/// loop's descriptors and timers, and dispatching what it reads, in bounded
/// batches. All of it runs on the loop, inside libdbus calls or the loop's
/// handlers; see `Connection` for the invariants.
extension Connection {
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

    // MARK: libdbus callbacks (all run on the loop, inside libdbus calls)

    private static func from(_ data: UnsafeMutableRawPointer?) -> Connection? {
        data.map { Unmanaged<Connection>.fromOpaque($0).takeUnretainedValue() }
    }

    static let filter: DBusHandleMessageFunction = { _, message, data in
        guard let message, let connection = from(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        return connection.handle(message)
    }

    static let dispatchStatusChanged: DBusDispatchStatusFunction = { _, status, data in
        if status == DBUS_DISPATCH_DATA_REMAINS { from(data)?.scheduleDispatch() }
    }

    static let wakeUp: DBusWakeupMainFunction = { data in
        from(data)?.scheduleDispatch()
    }

    static let addWatch: DBusAddWatchFunction = { watch, data in
        guard let watch, let connection = from(data) else { return 0 }
        connection.addWatch(watch)
        return 1
    }

    static let removeWatch: DBusRemoveWatchFunction = { watch, data in
        guard let watch, let connection = from(data), let id = connection.watches.removeValue(forKey: watch) else { return }
        connection.loop.removeWatch(id)
    }

    static let toggleWatch: DBusWatchToggledFunction = { watch, data in
        guard let watch, let connection = from(data), let id = connection.watches[watch] else { return }
        connection.loop.setInterest(id, interest(of: watch))
    }

    static let addTimeout: DBusAddTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return 0 }
        connection.timeoutsAdded.insert(timeout)
        connection.armTimeout(timeout)
        return 1
    }

    static let removeTimeout: DBusRemoveTimeoutFunction = { timeout, data in
        guard let timeout, let connection = from(data) else { return }
        connection.timeoutsAdded.remove(timeout)
        if let id = connection.timers.removeValue(forKey: timeout) { connection.loop.cancelTimer(id) }
    }

    static let toggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
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
