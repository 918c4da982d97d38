import LinkPolicy
import Pacing

/// Connect attempts in retry windows, from the Connect to the subscription.
extension Supervisor {
    /// The dongle's object exists for the decisions: observed, and not
    /// answered for as gone since (`Outage.deviceObjectGone`).
    #if DST_BUG_CONNECTS_REMOVED_OBJECT  // planted bug (make dst-selftest): trusts the observation alone
    var deviceKnown: Bool { observation.devicePresent }
    #else
    var deviceKnown: Bool { observation.devicePresent && current.outage?.deviceObjectGone != true }
    #endif

    mutating func attemptOrSearch(window: Window, cause: String, _ actions: inout Actions) {
        if deviceKnown {
            scheduleAttempt(window: window, cause: cause, &actions)
        } else {
            enterSearching(cause: cause, &actions)
        }
    }

    /// Schedules the next attempt of `window`, or exhausts it. No window: the
    /// failure was one that retrying soon will not fix.
    mutating func scheduleAttempt(window: Window?, cause: String, _ actions: inout Actions) {
        guard let window else { return enterCooldown(cause: cause, &actions) }
        // A blind attempt (after an escalation or a cooldown) is a single shot.
        if window.blind { return enterCooldown(cause: cause, &actions) }
        guard policy.windowAllows(attempt: window.attempts, at: now, windowStart: window.start) else {
            return exhaustWindow(window, &actions)
        }
        let n = window.attempts + 1
        let delay = policy.delay(beforeAttempt: n, unit: random.nextUnit())
        if n > 1, now + delay - window.start >= policy.window {
            // The next attempt would fall outside the window: give up on it now
            // rather than idle until then.
            return exhaustWindow(window, &actions)
        }
        if delay <= .zero {
            attempt(window: window, cause: cause, &actions)
        } else {
            startTimer(.retry, after: delay, &actions)
            enter(.backingOff(window, attemptAt: now + delay), "\(cause); attempt \(n) in \(delay.roundedText)", &actions)
        }
    }

    /// The dongle's object is there again after a search: the window its
    /// disappearance interrupted goes on (its next attempt after the
    /// backoff, within its bounds), else a fresh one starts now.
    mutating func attemptAfterSearch(cause: String, _ actions: inout Actions) {
        if let window = current.outage?.windowOfGoneObject {
            current.outage?.windowOfGoneObject = nil
            return scheduleAttempt(window: window, cause: cause, &actions)
        }
        attempt(window: Window(start: now), cause: cause, &actions)
    }

    mutating func attempt(window: Window, cause: String, _ actions: inout Actions) {
        guard observation.adapterUsable else {
            linkGoneQuietly(&actions)
            return enter(.waitingForAdapter(powerOnRetries: nil), "\(cause); but the adapter is not powered", &actions)
        }
        guard deviceKnown else { return enterSearching(cause: cause, &actions) }
        if current.outage?.bondLoss == .removing {
            if observation.deviceBonded {
                var window = window
                window.attempts += 1
                removeRefusedBond(&actions)
                return attemptFailed(
                    window, LinkFailure(.transient, "the dongle refuses the bond bluetoothd holds; removing it before connecting"),
                    cancel: false, &actions)
            }
            // Found again without it: the removal happened (its answer may
            // have been lost with bluetoothd).
            current.outage?.bondLoss = .renewed
        }
        var window = window
        window.attempts += 1
        let connect = nextOperation()
        actions.append(.report(.reconnectAttempt(attempt: window.attempts, blind: window.blind)))
        enter(
            .connecting(LinkSetup(window: window, attemptStartedAt: now, connectedSeen: observation.connected), connect: connect),
            "\(cause); attempt \(window.attempts)", &actions)
        actions.append(.connect(attempt: connect, timeout: policy.connectTimeout))
        startTimer(.attemptDeadline, after: policy.connectTimeout, &actions)
    }

    mutating func connectFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        #if DST_BUG_OLD_ANSWER_ACTS  // planted bug (make dst-selftest): an earlier attempt's answer taken for this one's
        guard case .outage(_, .connecting(let setup, _)) = current else { return }
        #else
        guard case .outage(_, .connecting(let setup, let connect)) = current, connect == id else { return }
        #endif
        switch result {
        case .success:
            if observation.linkReady {
                startSubscribing(setup, &actions)
            } else if setup.connectedSeen && !observation.connected {
                linkLost(cause: "the link dropped right after connecting", &actions)
            } else {
                enter(.resolving(setup), "connected; waiting for services", &actions)
            }
        case .failure(let failure):
            let droppedBeforeResolve = setup.connectedSeen && !observation.connected && observation.deviceBonded
            attemptFailed(setup.window, failure, cancel: failure.kind == .needsCancel, &actions)
            if droppedBeforeResolve {
                droppedBeforeResolving(failure.description, &actions)
            } else {
                current.outage?.dropsBeforeResolve = 0
            }
        }
    }

    /// Linux's LE connection timeout (HCI_LE_CONN_TIMEOUT, 20 s): a Connect
    /// the kernel makes ends by then, connected or not.
    static let kernelLEConnectionTimeout: Duration = .seconds(20)

    /// The connect attempt in flight took too long (or, after it, services,
    /// a pairing or the subscription did): a failed attempt, cancelled.
    mutating func attemptDeadlinePassed(_ actions: inout Actions) {
        guard case .outage(_, let recovery) = current else { return }
        switch recovery {
        case .connecting(let setup, _):
            // A stale-object sign when the Connect lasted the kernel's own
            // LE connection timeout: the kernel ends a connection it is
            // making to a silent peer with le-connection-abort-by-local
            // by then, so one still pending is an object the kernel never
            // even tried (bluetoothd 5.66 in `make e2e`: the dongle back
            // under its address as a random one, the object still public,
            // no LE Create Connection sent). At exactly that timeout (the
            // default) the kernel may be about to answer, but its answer,
            // abort-by-local, is the same sign. A shorter timeout proves
            // nothing: it also cuts off attempts on a dongle that merely
            // does not accept yet.
            let neverTried = policy.connectTimeout >= Self.kernelLEConnectionTimeout
            attemptFailed(
                setup.window,
                LinkFailure(
                    .needsCancel, "no connection within \(policy.connectTimeout.roundedText)", staleDevice: neverTried,
                    noAnswer: true),
                cancel: true, &actions
            )
        case .pairing(let setup, _):
            attemptFailed(
                setup.window, LinkFailure(.needsCancel, "pairing did not finish within \(settings.pairingTimeout.roundedText)"),
                cancel: true, &actions)
        case .resolving(let setup), .subscribing(let setup, _):
            let why = observation.gattProblem.map { ": \($0)" } ?? ""
            attemptFailed(
                setup.window, LinkFailure(.transient, "services not ready within \(policy.connectTimeout.roundedText)\(why)"),
                cancel: true, &actions)
        case .waitingForBluez, .waitingForAdapter, .searching, .waitingForData, .backingOff, .awaitingDisconnect,
             .escalating, .coolingDown, .away:
            break
        }
    }

    mutating func attemptFailed(_ window: Window, _ failure: LinkFailure, cancel: Bool, _ actions: inout Actions) {
        cancelTimer(.attemptDeadline, &actions)
        history.lastError = failure.description
        var window = window
        if failure.staleDevice {
            window.staleFailures += 1
            window.lastStaleError = failure.description
        }
        if failure.noAnswer { window.unanswered += 1 }
        actions.append(.report(.attemptFailed(attempt: window.attempts, error: failure.description)))
        if cancel { actions.append(.disconnect) }
        if failure.deviceGone {
            // Another attempt on the object would only fail the same way:
            // the dongle is unknown until discovery finds it again (after a
            // removal Tether asked for, the reply can come before
            // bluetoothd's InterfacesRemoved).
            current.outage?.deviceObjectGone = observation.devicePresent
            // A blind attempt never reached the dongle: the object's return
            // gets a fresh window, as after the escalation it followed.
            current.outage?.windowOfGoneObject = window.blind ? nil : window
            return enterSearching(cause: "attempt failed: \(failure.description)", &actions)
        }
        checkControllerIfDue(&window, &actions)
        if failure.kind == .fatal {
            return enterCooldown(cause: "error that retrying soon will not fix: \(failure.description)", &actions)
        }
        if case .reported(let problem)? = current.outage?.bondLoss {
            return enterCooldown(cause: problem, &actions)
        }
        if window.blind, cancel, !window.retriedAfterCancel {
            // The single shot never went out: a connect stuck in bluetoothd
            // took its place (InProgress). Cancelled now, it is tried once
            // more rather than a whole cooldown later, when a dongle that
            // stopped advertising may be asleep.
            window.retriedAfterCancel = true
            let delay = policy.initialBackoff
            startTimer(.retry, after: delay, &actions)
            return enter(
                .backingOff(window, attemptAt: now + delay),
                "attempt failed: \(failure.description); the stuck connect cancelled, trying again in \(delay.roundedText)",
                &actions)
        }
        scheduleAttempt(window: window, cause: "attempt failed: \(failure.description)", &actions)
    }

    mutating func startSubscribing(_ setup: LinkSetup, cause: String = "services resolved", _ actions: inout Actions) {
        if settings.pairs, !observation.deviceBonded, !setup.paired {
            return startPairing(setup, cause: cause, &actions)
        }
        let subscribe = nextOperation()
        enter(.subscribing(setup, subscribe: subscribe), cause, &actions)
        actions.append(.subscribe(attempt: subscribe))
    }

    mutating func subscribeFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        guard case .outage(_, .subscribing(let setup, let subscribe)) = current, subscribe == id else { return }
        switch result {
        case .success:
            subscribed(setup, &actions)
        case .failure(let failure):
            attemptFailed(setup.window, failure, cancel: true, &actions)
        }
    }

    /// The window after a loss: a link that never carried data keeps the
    /// window of the attempt that brought it up; otherwise a new one, in
    /// which a flapping link's drops count as failed attempts (a drop we
    /// asked for does not).
    func windowAfterLoss(_ window: Window?, requested: Bool) -> Window {
        if let window { return window }
        var window = Window(start: now, attempts: requested ? 0 : max(0, history.shortSessions - 1))
        window.flapped = window.attempts
        return window
    }
}
