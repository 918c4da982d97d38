import LinkPolicy
import Pacing

/// A link that is up: subscribed, online with data flowing, its loss, a
/// changed GATT database, and the silence limit.
extension Supervisor {
    /// Subscribed: online at once without a silence limit; with one, only
    /// once data flows (it may have come already: bluetoothd re-arms its
    /// notify sessions on reconnect, before we subscribe again).
    mutating func subscribed(_ setup: LinkSetup, _ actions: inout Actions) {
        let session = Session(subscribedAt: now, lastDataAt: setup.lastDataAt)
        guard let limit = settings.silenceLimit else {
            return goOnline(session, window: setup.window, resubscribing: setup.resubscribing, polling: false, &actions)
        }
        startTimer(.silence, after: limit, &actions)
        if setup.lastDataAt != nil {
            return goOnline(session, window: setup.window, resubscribing: setup.resubscribing, polling: false, &actions)
        }
        // The silence timer bounds this wait; the attempt's deadline is done.
        cancelTimer(.attemptDeadline, &actions)
        enter(
            .waitingForData(session, window: setup.window, resubscribing: setup.resubscribing),
            "subscribed; waiting for the first notification (silence limit \(limit.roundedText))", &actions)
        if settings.keepaliveEnabled { poll(&actions) }
    }

    /// The hot path: at most once per loop turn while notifications flow.
    mutating func dataReceived(_ actions: inout Actions) {
        switch current {
        case .online(var session, let since):
            session.lastDataAt = now
            current = .online(session, since: since)
        case .connecting(var setup, let connect):
            setup.lastDataAt = now
            current = .connecting(setup, connect: connect)
        case .resolving(var setup):
            setup.lastDataAt = now
            current = .resolving(setup)
        case .pairing(var setup, let pair):
            setup.lastDataAt = now
            current = .pairing(setup, pair: pair)
        case .subscribing(var setup, let subscribe):
            setup.lastDataAt = now
            current = .subscribing(setup, subscribe: subscribe)
        case .waitingForData(var session, let window, let resubscribing):
            session.lastDataAt = now
            goOnline(session, window: window, resubscribing: resubscribing, polling: true, &actions)
        case .waitingForBluez, .waitingForAdapter, .searching, .backingOff, .awaitingDisconnect, .escalating,
             .coolingDown, .away:
            break
        }
    }

    /// Online: the window of the attempt that got here is closed.
    /// `polling`: the keep-alive already runs (from waiting-for-data).
    mutating func goOnline(
        _ session: Session, window: Window, resubscribing: Bool, polling: Bool, _ actions: inout Actions
    ) {
        cancelTimer(.attemptDeadline, &actions)
        history.bondLoss = .none
        history.dropsBeforeResolve = 0
        if history.hasBeenOnline && !resubscribing { reconnects += 1 }
        history.hasBeenOnline = true
        history.removedStaleDevice = false
        actions.append(.report(.connected(attempt: window.attempts)))
        enter(
            .online(session, since: now),
            polling ? "data flows" : settings.silenceLimit == nil ? "subscribed" : "subscribed; data flows", &actions)
        // The first poll goes out at once: the dongle's idle clock has run
        // since the connect, and resolving services can take seconds.
        if settings.keepaliveEnabled && !polling { poll(&actions) }
    }

    /// The link went down while it was up or coming up. A drop while coming
    /// up is a failed attempt of the current window; a drop from online opens
    /// a new window, whose first attempt comes at once unless the link has
    /// been flapping.
    mutating func linkLost(cause: String, _ actions: inout Actions) {
        let window = current.window
        let wasOnline = countSession()
        stopLinkActivity(&actions)
        actions.append(.report(.disconnected(unexpected: true)))
        scheduleAttempt(
            window: wasOnline ? windowAfterLoss(nil, requested: false) : window ?? Window(start: now), cause: cause, &actions)
    }

    /// Counts a session that ends now against `stableLink`; false if the link
    /// was not online (it was still coming up).
    mutating func countSession() -> Bool {
        guard case .online(_, let since) = current else { return false }
        history.shortSessions = now - since < settings.stableLink ? history.shortSessions + 1 : 0
        return true
    }

    /// The notification socket closed while the link was up or being
    /// subscribed. The loss counts from now; bluetoothd's Connected=false
    /// normally follows within milliseconds and opens the retry window. If
    /// it does not come, the link is up without our notifications (another
    /// client's StopNotify): the deadline then connects again, which
    /// succeeds at once and acquires anew.
    /// While subscribing it is a failed attempt of the current window, as
    /// any drop while coming up.
    mutating func notificationsEnded(_ why: String, _ actions: inout Actions) {
        switch current {
        case .subscribing, .waitingForData:
            linkLost(cause: why, &actions)
        case .online:
            _ = countSession()
            stopLinkActivity(&actions)
            actions.append(.report(.disconnected(unexpected: true)))
            startTimer(.disconnectDeadline, after: settings.linkLossConfirmation, &actions)
            enter(
                .awaitingDisconnect(DisconnectWait(cause: why, requested: false, window: nil)),
                "\(why); waiting for bluetoothd to report the link down", &actions)
        case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .backingOff,
             .awaitingDisconnect, .escalating, .coolingDown, .away:
            break
        }
    }

    /// Drops a link that is up (or thought to be) and reconnects once
    /// bluetoothd confirms the disconnect, or after a deadline. `window`: the
    /// window that goes on afterwards (an attempt that never carried data).
    mutating func forceReconnect(cause: String, window: Window?, _ actions: inout Actions) {
        stopLinkActivity(&actions)
        actions.append(.disconnect)
        startTimer(.disconnectDeadline, after: policy.connectTimeout, &actions)
        enter(
            .awaitingDisconnect(DisconnectWait(cause: cause, requested: true, window: window)), "\(cause); disconnecting",
            &actions)
    }

    /// The wait for bluetoothd to confirm a link loss ran out.
    mutating func disconnectDeadlinePassed(_ actions: inout Actions) {
        guard case .awaitingDisconnect(let wait) = current else { return }
        scheduleAttempt(
            window: windowAfterLoss(wait.window, requested: wait.requested),
            cause: "\(wait.cause); " + (wait.requested ? "disconnect not confirmed" : "bluetoothd still shows the link up"),
            &actions)
    }

    // MARK: A changed GATT database

    /// Subscribes again on the new objects, or waits (bounded by the attempt
    /// deadline) for them to be exported. A failure from here on is a failed
    /// attempt of a window, as for any link coming up.
    mutating func characteristicsChanged(_ actions: inout Actions) {
        let connectedSeen: Bool
        switch current {
        case .resolving(let setup), .pairing(let setup, _), .subscribing(let setup, _): connectedSeen = setup.connectedSeen
        case .waitingForData, .online: connectedSeen = observation.connected
        case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .backingOff, .awaitingDisconnect, .escalating,
             .coolingDown, .away:
            return
        }
        let window = current.window ?? Window(start: now, attempts: 1)
        stopLinkActivity(&actions)
        startTimer(.attemptDeadline, after: policy.connectTimeout, &actions)
        let setup = LinkSetup(window: window, connectedSeen: connectedSeen, resubscribing: true)
        if observation.linkReady {
            startSubscribing(setup, cause: "the dongle's GATT database changed; subscribing again", &actions)
        } else {
            enter(.resolving(setup), "the dongle's GATT database changed; waiting for its characteristics", &actions)
        }
    }

    // MARK: Silence

    /// The silence timer fired: judge the time since the last notification
    /// (or since the subscription, if none came) and re-arm for the rest.
    mutating func silenceTimerFired(_ actions: inout Actions) {
        guard let limit = settings.silenceLimit, let session = current.session else { return }
        let reference = max(session.lastDataAt ?? session.subscribedAt, session.subscribedAt)
        let silent = now - reference
        guard silent >= limit else { return startTimer(.silence, after: limit - silent, &actions) }
        let window = current.window
        #if DST_BUG_ONLINE_AFTER_SILENCE  // planted bug (make dst-selftest): a proven link stays online, silent
        if window == nil { return startTimer(.silence, after: limit, &actions) }
        #endif
        let proven = window == nil  // online; waiting-for-data keeps its attempt's window
        let what = proven
            ? "no notification for \(silent.roundedText) (silence limit \(limit.roundedText))"
            : "no notification within \(silent.roundedText) of subscribing (silence limit \(limit.roundedText))"
        silenceEvents += 1
        lastError = what
        actions.append(.report(.silence(silentFor: silent, limit: limit, proven: proven)))
        if var window {
            // The attempt that brought the link up never carried data: it
            // failed, and its window (still open) goes on.
            actions.append(.report(.attemptFailed(attempt: window.attempts, error: what)))
            checkControllerIfDue(&window, &actions)
            return forceReconnect(cause: what, window: window, &actions)
        }
        // A link that carried data fell silent: a hung application, or a
        // controller that stopped answering (its link layer may keep the
        // link up in bluetoothd's eyes). Asking tells them apart at once.
        requestControllerCheck(&actions)
        forceReconnect(cause: what, window: nil, &actions)
    }
}
