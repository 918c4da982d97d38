import LinkPolicy
import Pacing

/// The keep-alive of a link that is up: polls at a fixed rate, each judged
/// by its answer or its deadline; failed polls in a row force a reconnect.
extension Supervisor {
    /// Runs `body` on the session of a link that is up; false if there is none.
    mutating func withSession(_ body: (inout Session) -> Void) -> Bool {
        switch current {
        case .waitingForData(var session, let window, let resubscribing):
            body(&session)
            current = .waitingForData(session, window: window, resubscribing: resubscribing)
        case .online(var session, let since):
            body(&session)
            current = .online(session, since: since)
        case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
             .backingOff, .awaitingDisconnect, .escalating, .coolingDown, .away:
            return false
        }
        return true
    }

    mutating func poll(_ actions: inout Actions) {
        guard let session = current.session else { return }
        #if DST_BUG_NO_KEEPALIVE_AFTER_RECONNECT  // planted bug (make dst-selftest): polls stop after the first reconnect
        if reconnects > 0 { return }
        #endif
        // Fixed rate: the next poll is due one interval after this one
        // started, whatever this one takes.
        startTimer(.keepalive, after: settings.keepaliveInterval, &actions)
        if session.pollInFlight != nil { return }  // the deadline will judge it
        if let every = settings.keepaliveConfirmEvery, let last = session.lastConfirmedPollAt, now - last < every {
            actions.append(.pollWithoutReply)
            return
        }
        let poll = nextOperation(), sentAt = now
        _ = withSession { session in
            session.pollInFlight = poll
            session.lastConfirmedPollAt = sentAt
        }
        actions.append(.poll(poll, timeout: settings.keepaliveTimeout))
        startTimer(.pollDeadline, after: settings.keepaliveTimeout, &actions)
    }

    mutating func pollFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        guard let session = current.session, session.pollInFlight == id else { return }
        _ = withSession { session in
            session.pollInFlight = nil
            if case .success = result { session.failedPolls = 0 }
        }
        cancelTimer(.pollDeadline, &actions)
        if case .failure(let failure) = result { pollFailed(failure.description, &actions) }
    }

    /// The poll in flight got no answer within `keepaliveTimeout`.
    mutating func pollDeadlinePassed(_ actions: inout Actions) {
        guard let session = current.session, session.pollInFlight != nil else { return }
        _ = withSession { $0.pollInFlight = nil }
        pollFailed("no reply within \(settings.keepaliveTimeout.roundedText)", &actions)
    }

    mutating func pollFailed(_ error: String, _ actions: inout Actions) {
        var failed = 0
        guard withSession({ session in
            session.failedPolls += 1
            failed = session.failedPolls
        }) else { return }
        lastError = "keep-alive: \(error)"
        #if DST_BUG_STATUS_CHANGED_UNTOLD  // planted bug (make dst-selftest): a failed poll changes the status silently
        if failed < settings.failedPollsBeforeReconnect { return }
        #endif
        actions.append(.report(.linkCheckFailed(consecutive: failed, error: error)))
        if failed >= settings.failedPollsBeforeReconnect {
            forceReconnect(cause: "\(failed) keep-alive polls failed in a row", window: current.window, &actions)
        }
    }
}
