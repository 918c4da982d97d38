import LinkPolicy

/// Asking the controller itself, below bluetoothd, whether it answers: a
/// wedged one makes every attempt fail while bluetoothd says it is powered.
extension Supervisor {
    /// Asks the controller whether it answers once a window has failed
    /// `controllerCheckAfterFailures` attempts, or a cooldown's blind attempt
    /// failed (nothing else would notice a controller that wedged while the
    /// dongle slept: with it, the dongle's adverts never arrive), once per
    /// window.
    mutating func checkControllerIfDue(_ window: inout Window, _ actions: inout Actions) {
        guard let after = settings.controllerCheckAfterFailures, window.attempts >= after || window.blind,
              !window.controllerChecked, let outage = current.outage, outage.controllerCheck == nil
        else { return }
        window.controllerChecked = true
        requestControllerCheck(&actions)
    }

    /// Asks the controller, unless a check of this outage is in flight.
    mutating func requestControllerCheck(_ actions: inout Actions) {
        guard let outage = current.outage, outage.controllerCheck == nil, let check = newControllerCheck(&actions)
        else { return }
        current.outage?.controllerCheck = check
    }

    /// Asks the controller: the check's id, for the outage that waits for
    /// its answer to hold (nil: checks are off, `controllerCheckAfterFailures`).
    mutating func newControllerCheck(_ actions: inout Actions) -> Int? {
        guard settings.controllerCheckAfterFailures != nil else { return nil }
        let check = nextOperation()
        actions.append(.checkController(check))
        return check
    }

    /// How long others' advertisements show that the controller works
    /// against an unanswered check: they are told at most every 10 s
    /// (`LinkService.othersAdvertisingEvery`), and the check waits 5 s.
    public static let advertisementsVouchFor: Duration = .seconds(16)

    /// The controller's own answer. A wedged one ends the attempts at once,
    /// whatever is in flight (it cannot succeed): the steps run without the
    /// power cycle, which goes through the very controller that does not
    /// answer (Home Assistant's recovery skips the power-off for a frozen
    /// one too).
    /// The answer to a check of an outage that is over is stale.
    mutating func controllerChecked(_ id: Int, _ check: ControllerCheck, _ actions: inout Actions) {
        guard let outage = current.outage, outage.controllerCheck == id else { return }
        current.outage?.controllerCheck = nil
        if check == .responsive {
            history.controllerAnsweredAt = now
            evidenceArrived("the controller answers", &actions)  // acts only while listening away
        }
        if case .outage(_, .escalating(let escalation)) = current, escalation.phase == .awaitingControllerCheck(check: id) {
            return stepsAfterControllerCheck(escalation, check, &actions)
        }
        guard case .unresponsive(let detail) = check else { return }
        // Waiting on discovery, advertisements that came through the
        // controller just now outweigh one command it answered late (a
        // loaded gateway; Bumble's controller in a TCG guest took over 5 s
        // once in `make e2e`'s parked): a wedged controller passes nothing
        // up, and the next check finds it so.
        if current.waitsForAdvertisement, let heardAt = history.othersHeardAt,
           now - heardAt <= Self.advertisementsVouchFor
        {
            return actions.append(.report(.controllerSlow(detail, heardAgo: now - heardAt)))
        }
        actions.append(.report(.controllerUnresponsive(detail)))
        let steps = settings.escalation.filter { $0 != .powerCycle }
        guard case .outage(_, let recovery) = current else { return }
        switch recovery {
        case .backingOff:
            cancelTimer(.retry, &actions)
        case .connecting, .resolving, .pairing, .subscribing, .waitingForData:
            stopLinkActivity(&actions)
            actions.append(.disconnect)  // cancels a pending Connect, drops a half-made link
        case .awaitingDisconnect:
            cancelTimer(.disconnectDeadline, &actions)
        case .coolingDown:
            // Its blind attempt failed on a controller that does not answer:
            // waiting for adverts it cannot hear would last for good. The
            // steps run now, once per cooldown (their own blind attempt does
            // not ask again).
            guard !steps.isEmpty else { return }
            cancelTimer(.retry, &actions)
            stopDiscoveryIfRunning(&actions)
        case .searching, .away:
            // Discovery through a controller that does not answer hears
            // nothing. The steps run at the pace of the search checks (the
            // escalation ends in a search, whose first check waits longer).
            guard !steps.isEmpty else { return }
            stopDiscoveryIfRunning(&actions)
        case .waitingForBluez, .waitingForAdapter, .escalating:
            // Already past attempting: nothing to end (steps that waited
            // for this answer took it above).
            return
        }
        if let window = current.window { actions.append(.report(.windowExhausted(attempts: window.attempts))) }
        stepsForSilentController(steps, &actions)
    }

    /// The controller does not answer: `steps` (the power cycle left out)
    /// run, or a cooldown when none is left.
    mutating func stepsForSilentController(_ steps: [EscalationStep], _ actions: inout Actions) {
        let cause = "the controller does not answer"
        if steps.isEmpty { return enterCooldown(cause: cause, &actions) }
        escalate(steps, reconnectRequested: false, cause: cause, &actions)
    }
}
