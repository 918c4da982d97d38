import LinkPolicy
import Pacing

/// A link that is up: subscribed, online with data flowing, its loss, a
/// changed GATT database, and the silence limit.
extension Supervisor {
    /// Subscribed: online at once without a silence limit; with one, only
    /// once data flows (it may have come already: bluetoothd re-arms its
    /// notify sessions on reconnect, before we subscribe again).
    /// The session is made with its keep-alive armed; the first poll goes
    /// out at once (the dongle's idle clock has run since the connect, and
    /// resolving services can take seconds), told after the transition.
    mutating func subscribed(_ setup: LinkSetup, _ actions: inout Actions) {
        var firstPoll: Actions = []
        let session = Session(subscribedAt: now, lastDataAt: setup.lastDataAt, keepAlive: startKeepAlive(&firstPoll))
        if let limit = settings.silenceLimit {
            startTimer(.silence, after: limit, &actions)
            if setup.lastDataAt == nil {
                // The silence timer bounds this wait; the attempt's deadline is done.
                cancelTimer(.attemptDeadline, &actions)
                enter(
                    .waitingForData(session, window: setup.window, resubscribing: setup.resubscribing),
                    "subscribed; waiting for the first notification (silence limit \(limit.roundedText))", &actions)
                return actions.append(contentsOf: firstPoll)
            }
        }
        goOnline(
            session, window: setup.window, resubscribing: setup.resubscribing,
            settings.silenceLimit == nil ? "subscribed" : "subscribed; data flows", &actions)
        actions.append(contentsOf: firstPoll)
    }

    /// The hot path: at most once per loop turn while notifications flow.
    mutating func dataReceived(_ actions: inout Actions) {
        let recovery: Recovery
        switch current {
        case .online(var session, let since):
            session.lastDataAt = now
            current = .online(session, since: since)
            return
        case .outage(_, let step):
            recovery = step
        }
        switch recovery {
        case .connecting(var setup, let connect):
            setup.lastDataAt = now
            update(.connecting(setup, connect: connect))
        case .resolving(var setup):
            setup.lastDataAt = now
            update(.resolving(setup))
        case .pairing(var setup, let pair):
            setup.lastDataAt = now
            update(.pairing(setup, pair: pair))
        case .subscribing(var setup, let subscribe):
            setup.lastDataAt = now
            update(.subscribing(setup, subscribe: subscribe))
        case .waitingForData(var session, let window, let resubscribing):
            // The keep-alive already runs: the session goes on, online.
            session.lastDataAt = now
            goOnline(session, window: window, resubscribing: resubscribing, "data flows", &actions)
        case .waitingForBluez, .waitingForAdapter, .searching, .backingOff, .awaitingDisconnect, .escalating,
             .coolingDown, .away:
            break
        }
    }

    /// Online: the window of the attempt that got here is closed, and the
    /// outage is over (its facts go with it).
    mutating func goOnline(
        _ session: Session, window: Window, resubscribing: Bool, _ cause: String, _ actions: inout Actions
    ) {
        cancelTimer(.attemptDeadline, &actions)
        if history.hasBeenOnline && !resubscribing { history.reconnects += 1 }
        history.hasBeenOnline = true
        actions.append(.report(.connected(attempt: window.attempts)))
        enterOnline(session, cause, &actions)
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
        case .online:
            linkEnding(cause: why, &actions)
        case .outage(_, let recovery):
            switch recovery {
            case .subscribing, .waitingForData:
                linkLost(cause: why, &actions)
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .backingOff,
                 .awaitingDisconnect, .escalating, .coolingDown, .away:
                break
            }
        }
    }

    /// The online link has ended by another sign than bluetoothd's own (the
    /// notification socket closed, the kernel said why): the session is
    /// counted and the outage begins now; the next attempt waits for
    /// bluetoothd to report the link down, or `linkLossConfirmation`.
    mutating func linkEnding(cause: String, _ actions: inout Actions) {
        _ = countSession()
        stopLinkActivity(&actions)
        actions.append(.report(.disconnected(unexpected: true)))
        startTimer(.disconnectDeadline, after: settings.linkLossConfirmation, &actions)
        enter(
            .awaitingDisconnect(DisconnectWait(cause: cause, requested: false, window: nil)),
            "\(cause); waiting for bluetoothd to report the link down", &actions)
    }

    /// Drops a link that is up (or thought to be) and reconnects once
    /// bluetoothd confirms the disconnect, or after a deadline. `window`: the
    /// window that goes on afterwards (an attempt that never carried data);
    /// `beginning`: the outage that begins, if the link was online.
    mutating func forceReconnect(
        cause: String, window: Window?, beginning outage: Outage = Outage(), _ actions: inout Actions
    ) {
        stopLinkActivity(&actions)
        actions.append(.disconnect)
        startTimer(.disconnectDeadline, after: policy.connectTimeout, &actions)
        enter(
            .awaitingDisconnect(DisconnectWait(cause: cause, requested: true, window: window)), "\(cause); disconnecting",
            beginning: outage, &actions)
    }

    /// The wait for bluetoothd to confirm a link loss ran out.
    mutating func disconnectDeadlinePassed(_ actions: inout Actions) {
        guard case .outage(_, .awaitingDisconnect(let wait)) = current else { return }
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
        case .online:
            connectedSeen = observation.connected
        case .outage(_, let recovery):
            switch recovery {
            case .resolving(let setup), .pairing(let setup, _), .subscribing(let setup, _): connectedSeen = setup.connectedSeen
            case .waitingForData: connectedSeen = observation.connected
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .backingOff, .awaitingDisconnect,
                 .escalating, .coolingDown, .away:
                return
            }
        }
        let window = current.window ?? Window(start: now, attempts: 1)
        stopLinkActivity(&actions)
        startTimer(.attemptDeadline, after: policy.connectTimeout, &actions)
        let setup = LinkSetup(window: window, attemptStartedAt: now, connectedSeen: connectedSeen, resubscribing: true)
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
        history.silenceEvents += 1
        history.lastError = what
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
        // link up in bluetoothd's eyes). Asking tells them apart at once:
        // the check belongs to the outage that begins now.
        let check = newControllerCheck(&actions)
        forceReconnect(cause: what, window: nil, beginning: Outage(controllerCheck: check), &actions)
    }
}
