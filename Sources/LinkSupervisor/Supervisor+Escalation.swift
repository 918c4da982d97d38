import LinkPolicy

/// An exhausted retry window: the escalation steps (or cooling down), step
/// by step, and what the adapter is left as afterwards.
extension Supervisor {
    mutating func exhaustWindow(_ window: Window, _ actions: inout Actions) {
        if foundNobody(window) {
            // Away or not: an object that looks stale and holds no bond goes
            // now (discovery makes it anew when the dongle advertises; a
            // stale one would never show that), a bonded one never here.
            if !observation.deviceBonded { removeStaleDeviceIfDue(window, &actions) }
            if let evidence = controllerEvidence(since: window.start) { return confirmAway(evidence: evidence, &actions) }
            return listenForEvidence(after: window, &actions)
        }
        windowFailed(window, &actions)
    }

    /// An exhausted window that is a fault: the stale object removed if it
    /// looks so, then the escalation steps or cooling down.
    mutating func windowFailed(_ window: Window, _ actions: inout Actions) {
        actions.append(.report(.windowExhausted(attempts: window.attempts)))
        // Then as after any exhausted window: the escalation steps, or
        // cooling down. Either way discovery makes the object anew once the
        // dongle advertises, and the next window starts from it.
        removeStaleDeviceIfDue(window, &actions)
        if settings.escalation.isEmpty { return enterCooldown(cause: "retry window exhausted", &actions) }
        escalate(settings.escalation, reconnectRequested: false, &actions)
    }

    /// Runs the first of `steps`; with none left, one attempt to see whether
    /// the escalation helped (or the reconnect someone asked for meanwhile).
    /// `rfkill-unblock` is skipped while nothing is soft-blocked: it would
    /// change nothing and only log a step "done".
    mutating func escalate(
        _ steps: [EscalationStep], reconnectRequested: Bool, cause: String = "retry window exhausted",
        _ actions: inout Actions
    ) {
        let steps = steps.drop { $0 == .rfkillUnblock && observation.radioBlock != .soft }
        guard let step = steps.first else {
            if reconnectRequested { return attempt(window: Window(start: now), cause: "reconnect requested", &actions) }
            // Not asked about the controller if it fails: the steps just
            // dealt with it, and asking again would run them again at once.
            // The next cooldown's blind attempt asks.
            return attempt(window: Window(start: now, blind: true, controllerChecked: true), cause: "escalation done", &actions)
        }
        #if DST_BUG_STEPS_BEFORE_CONTROLLER_VERDICT  // planted bug (make dst-selftest): steps run before the check's answer
        let waitsForCheck = false
        #else
        let waitsForCheck = steps.contains(.powerCycle)
        #endif
        if waitsForCheck, let check = current.outage?.controllerCheck {
            // The check's answer decides whether the power cycle runs
            // (`stepsAfterControllerCheck`); it comes within the check's
            // own bound.
            let escalation = Escalation(
                purpose: .exhaustedWindow, cause: cause, phase: .awaitingControllerCheck(check: check),
                remaining: Array(steps))
            return enter(.escalating(escalation), "\(cause); asking the controller before the steps", &actions)
        }
        let run = nextOperation()
        let escalation = Escalation(
            purpose: .exhaustedWindow, cause: cause, phase: .running(step, run: run), remaining: Array(steps.dropFirst()))
        enter(.escalating(escalation), "\(cause); \(step.rawValue)", &actions)
        actions.append(.escalate(step, run: run))
    }

    /// The controller check the steps waited for has answered: they run,
    /// without the power cycle if the controller does not answer. (A
    /// reconnect asked for meanwhile did not wait: `reconnectRequested`.)
    mutating func stepsAfterControllerCheck(_ escalation: Escalation, _ check: ControllerCheck, _ actions: inout Actions) {
        guard case .unresponsive(let detail) = check else {
            return escalate(escalation.remaining, reconnectRequested: false, cause: escalation.cause, &actions)
        }
        actions.append(.report(.controllerUnresponsive(detail)))
        stepsForSilentController(escalation.remaining.filter { $0 != .powerCycle }, &actions)
    }

    mutating func escalationFinished(
        _ step: EscalationStep, run: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions
    ) {
        guard case .outage(_, .escalating(let escalation)) = current, escalation.phase == .running(step, run: run)
        else { return }
        switch result {
        case .success: actions.append(.report(.escalation(step, outcome: "done")))
        case .failure(let failure): actions.append(.report(.escalation(step, outcome: failure.description)))
        }
        if !observation.bluezReachable {
            linkGoneQuietly(&actions)
            return enter(
                .waitingForBluez, observation.bluezPresent ? "bluetoothd does not answer" : "bluetoothd is not on the bus",
                &actions)
        }
        switch escalation.purpose {
        case .adapterRecovery: return recoveryStepFinished(escalation, step: step, &actions)
        case .exhaustedWindow: break
        }
        if !observation.adapterUsable, !escalation.remaining.isEmpty, !escalation.reconnectRequested {
            // A wedged controller can be off or gone after a step that could
            // not reach it (a power cycle through bluetoothd); the next step,
            // a USB reset, may be the one that brings it back.
            return escalate(escalation.remaining, reconnectRequested: false, cause: escalation.cause, &actions)
        }
        if !observation.adapterUsable {
            linkGoneQuietly(&actions)
            return adapterUnusableAfter(step, &actions)
        }
        escalate(
            escalation.reconnectRequested ? [] : escalation.remaining, reconnectRequested: escalation.reconnectRequested,
            cause: escalation.cause, &actions)
    }

    /// After the last step, the adapter is still unusable: power it on if the
    /// step left it off, else wait for it (recovering it if steps apply).
    mutating func adapterUnusableAfter(_ step: EscalationStep, _ actions: inout Actions) {
        let cause = "\(adapterProblem) after \(step.rawValue)"
        guard observation.adapterPresent, observation.radioBlock == .none else {
            enter(.waitingForAdapter(powerOnRetries: nil), cause, &actions)
            return considerAdapterRecovery(&actions)
        }
        // We switched it off (or reset it and it came back off); nobody else
        // will switch it on.
        actions.append(.report(.adapterLeftOff))
        actions.append(.powerOn)
        startTimer(.powerOn, after: powerOnDelay(afterRetries: 0), &actions)
        enter(.waitingForAdapter(powerOnRetries: 0), cause, &actions)
    }
}
