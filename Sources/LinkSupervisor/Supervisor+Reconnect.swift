/// `tether reconnect`: a person asks for a connect attempt now.
extension Supervisor {
    mutating func reconnectRequested(_ actions: inout Actions) {
        reconnectAnswerOwed = true
        guard case .outage(_, let recovery) = current else {
            // Online: a person's request starts a fresh window.
            history.shortSessions = 0
            return forceReconnect(cause: "reconnect requested", window: nil, &actions)
        }
        switch recovery {
        case .waitingForBluez:
            actions.append(.answerReconnect(.notReady("bluetoothd is not running")))
        case .waitingForAdapter:
            let steps = recoverySteps
            actions.append(.answerReconnect(.notReady(steps.isEmpty ? adapterProblem : "\(adapterProblem); recovering it now")))
            // A person asked: the next recovery round need not wait its pace.
            if !steps.isEmpty {
                cancelTimer(.adapterRecovery, &actions)
                runRecovery(steps, &actions)
            }
        case .waitingForData, .subscribing, .pairing, .resolving:
            history.shortSessions = 0
            // A person's request starts a fresh window.
            forceReconnect(cause: "reconnect requested", window: nil, &actions)
        case .connecting(var setup, let connect):
            // The attempt in flight becomes the first of a fresh window,
            // which began with it (its later attempts stay within `window`
            // of the first, as every window's do; the DST's seed 83).
            history.shortSessions = 0
            setup.window = Window(start: setup.attemptStartedAt, attempts: 1)
            update(.connecting(setup, connect: connect))
        case .escalating(var escalation):
            switch escalation.phase {
            case .awaitingControllerCheck:
                // Nothing runs yet: the attempt goes now, and the check's
                // answer is taken as any attempt's would be.
                history.shortSessions = 0
                attempt(window: Window(start: now), cause: "reconnect requested", &actions)
            case .running:
                // The step may have the adapter off right now.
                escalation.reconnectRequested = true
                update(.escalating(escalation))
            }
        case .awaitingDisconnect:
            break  // already reconnecting
        case .backingOff, .coolingDown, .searching, .away:
            history.shortSessions = 0
            cancelTimer(.retry, &actions)
            stopDiscoveryIfRunning(&actions)
            attempt(window: Window(start: now), cause: "reconnect requested", &actions)
        }
    }
}
