import LinkPolicy
import Pacing

extension Supervisor {
    /// The keep-alive of a session (a link that is up): polls at a fixed
    /// rate, each judged by its answer or its deadline; failed polls in a
    /// row force a reconnect.
    ///
    /// Invariant: a value exists only armed. Its one initializer is private
    /// to this file and called by `startKeepAlive` alone, which (when the
    /// settings enable the keep-alive) sends the first poll and starts the
    /// `keepalive` timer in the same step; each fire of the timer starts it
    /// again. A `Session` cannot be made without one, so the state cannot
    /// say "up with no keep-alive armed". Only this file changes its fields.
    struct KeepAlive: Sendable {
        /// The settings enable the keep-alive (otherwise nothing is polled).
        let polling: Bool
        /// The poll in flight (its operation id), judged by its deadline.
        fileprivate(set) var pollInFlight: Int?
        /// When the last poll that waits for an answer was sent; nil before
        /// the session's first poll.
        fileprivate(set) var lastConfirmedPollAt: Duration?
        fileprivate(set) var failedPolls = 0

        fileprivate init(polling: Bool) { self.polling = polling }
    }

    /// The keep-alive of a session that starts now, armed: the first poll
    /// at once (it waits for its answer, so a write bluetoothd refuses shows
    /// at once), and the timer for the next.
    mutating func startKeepAlive(_ actions: inout Actions) -> KeepAlive {
        var keepAlive = KeepAlive(polling: settings.keepaliveEnabled)
        if keepAlive.polling { poll(&keepAlive, &actions) }
        return keepAlive
    }

    mutating func keepAliveTimerFired(_ actions: inout Actions) {
        #if DST_BUG_NO_KEEPALIVE_AFTER_RECONNECT  // planted bug (make dst-selftest): polls stop after the first reconnect
        if history.reconnects > 0 { return }
        #endif
        guard var keepAlive = current.session?.keepAlive else { return }
        poll(&keepAlive, &actions)
        update(keepAlive)
    }

    /// Fixed rate: the next poll is due one interval after this one
    /// started, whatever this one takes.
    private mutating func poll(_ keepAlive: inout KeepAlive, _ actions: inout Actions) {
        startTimer(.keepalive, after: settings.keepaliveInterval, &actions)
        if keepAlive.pollInFlight != nil { return }  // the deadline will judge it
        if let every = settings.keepaliveConfirmEvery, let last = keepAlive.lastConfirmedPollAt, now - last < every {
            return actions.append(.pollWithoutReply)
        }
        let poll = nextOperation()
        keepAlive.pollInFlight = poll
        keepAlive.lastConfirmedPollAt = now
        actions.append(.poll(poll, timeout: settings.keepaliveTimeout))
        startTimer(.pollDeadline, after: settings.keepaliveTimeout, &actions)
    }

    mutating func pollFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        guard var keepAlive = current.session?.keepAlive, keepAlive.pollInFlight == id else { return }
        keepAlive.pollInFlight = nil
        if case .success = result { keepAlive.failedPolls = 0 }
        update(keepAlive)
        cancelTimer(.pollDeadline, &actions)
        if case .failure(let failure) = result { pollFailed(failure.description, &actions) }
    }

    /// The poll in flight got no answer within `keepaliveTimeout`.
    mutating func pollDeadlinePassed(_ actions: inout Actions) {
        guard var keepAlive = current.session?.keepAlive, keepAlive.pollInFlight != nil else { return }
        keepAlive.pollInFlight = nil
        update(keepAlive)
        pollFailed("no reply within \(settings.keepaliveTimeout.roundedText)", &actions)
    }

    private mutating func pollFailed(_ error: String, _ actions: inout Actions) {
        guard var keepAlive = current.session?.keepAlive else { return }
        keepAlive.failedPolls += 1
        update(keepAlive)
        let failed = keepAlive.failedPolls
        history.lastError = "keep-alive: \(error)"
        #if DST_BUG_STATUS_CHANGED_UNTOLD  // planted bug (make dst-selftest): a failed poll changes the status silently
        if failed < settings.failedPollsBeforeReconnect { return }
        #endif
        actions.append(.report(.linkCheckFailed(consecutive: failed, error: error)))
        if failed >= settings.failedPollsBeforeReconnect {
            forceReconnect(cause: "\(failed) keep-alive polls failed in a row", window: current.window, &actions)
        }
    }

    /// Puts the session's keep-alive back after a change.
    private mutating func update(_ keepAlive: KeepAlive) {
        switch current {
        case .online(var session, let since):
            session.keepAlive = keepAlive
            current = .online(session, since: since)
        case .outage(let outage, let recovery):
            switch recovery {
            case .waitingForData(var session, let window, let resubscribing):
                session.keepAlive = keepAlive
                current = .outage(outage, .waitingForData(session, window: window, resubscribing: resubscribing))
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
                 .backingOff, .awaitingDisconnect, .escalating, .coolingDown, .away:
                break
            }
        }
    }
}
