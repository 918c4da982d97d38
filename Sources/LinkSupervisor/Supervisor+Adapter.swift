import LinkPolicy
import Pacing

/// An adapter that is unusable: why, the recovery rounds that may bring it
/// back (rfkill unblock, USB reset or rebind), and powering it on again after
/// an escalation left it off; the pacing of whatever stays broken.
extension Supervisor {
    /// Why the adapter is unusable, for transitions, status and the log.
    var adapterProblem: String {
        switch observation.radioBlock {
        case .hard: return "blocked by a hardware switch (rfkill hard block)"
        case .soft: return "blocked by rfkill (soft block)"
        case .none: break
        }
        if observation.adapterPresent { return "the adapter is powered off" }
        return observation.controllerFailed ? "no Bluetooth adapter: the controller failed its initialisation" : "no Bluetooth adapter"
    }

    /// The configured steps that can help the adapter as observed now: an
    /// rfkill unblock for a soft block; a USB reset or rebind for a
    /// controller that failed its initialisation. None for a hard block,
    /// which is waited out.
    var recoverySteps: [EscalationStep] {
        switch observation.radioBlock {
        case .hard: return []
        case .soft: return settings.escalation.contains(.rfkillUnblock) ? [.rfkillUnblock] : []
        case .none: break
        }
        guard !observation.adapterPresent, observation.controllerFailed else { return [] }
        return settings.escalation.filter(\.reprobesController)
    }

    /// Waiting for the adapter: runs the steps that apply, at once the first
    /// time, then no sooner than the pace of `adapterRecovery` allows.
    mutating func considerAdapterRecovery(_ actions: inout Actions) {
        guard case .outage(_, .waitingForAdapter) = current, !armedTimers.contains(.adapterRecovery) else { return }
        let steps = recoverySteps
        guard !steps.isEmpty else { return }
        if history.adapterRecoveries == 0 { return runRecovery(steps, &actions) }
        startTimer(.adapterRecovery, after: recoveryDelay, &actions)
    }

    /// Runs the first of `steps`; `continuing`: the next step of a round.
    mutating func runRecovery(_ steps: [EscalationStep], continuing: Bool = false, _ actions: inout Actions) {
        guard let step = steps.first else { return }
        if !continuing { history.adapterRecoveries += 1 }
        let run = nextOperation()
        let escalation = Escalation(
            purpose: .adapterRecovery, cause: adapterProblem, phase: .running(step, run: run),
            remaining: Array(steps.dropFirst()))
        enter(.escalating(escalation), "\(adapterProblem); \(step.rawValue)", &actions)
        actions.append(.escalate(step, run: run))
    }

    /// The adapter is unusable now: if it had stayed usable long enough, the
    /// rounds before count no more.
    mutating func adapterBecameUnusable() {
        guard let since = history.adapterUsableSince else { return }
        history.adapterUsableSince = nil
        if now - since >= settings.adapterRecoveryDelay { history.adapterRecoveries = 0 }
    }

    /// The pause before the next power-on, after `retries` of them.
    func powerOnDelay(afterRetries retries: Int) -> Duration {
        pacedDelay(settings.powerOnRetry, doubled: retries)
    }

    /// The pause before the next round, after `history.adapterRecoveries` rounds.
    var recoveryDelay: Duration {
        pacedDelay(settings.adapterRecoveryDelay, doubled: max(history.adapterRecoveries, 1) - 1)
    }

    /// `first` doubled `times` times, at most `cap` (by default
    /// `adapterRecoveryDelayCap`): the pace of whatever Tether keeps doing
    /// for something that stays broken.
    func pacedDelay(_ first: Duration, doubled times: Int, cap: Duration? = nil) -> Duration {
        Backoff(first: first, cap: cap ?? settings.adapterRecoveryDelayCap).delay(afterFailures: times)
    }

    mutating func recoveryStepFinished(_ escalation: Escalation, step: EscalationStep, _ actions: inout Actions) {
        if observation.adapterUsable {
            history.adapterUsableSince = now
            return attemptOrSearch(
                window: Window(start: now), cause: "\(step.rawValue) brought the adapter back", &actions)
        }
        let applicable = recoverySteps
        let next = escalation.remaining.filter(applicable.contains)
        if !next.isEmpty, !escalation.reconnectRequested { return runRecovery(next, continuing: true, &actions) }
        if applicable.isEmpty, observation.adapterPresent, !observation.adapterPowered, observation.radioBlock == .none {
            // Back, but off (a controller re-probed by a USB step comes back
            // unpowered unless bluetoothd's AutoEnable is on).
            return adapterUnusableAfter(step, &actions)
        }
        enter(.waitingForAdapter(powerOnRetries: nil), "\(adapterProblem) after \(step.rawValue)", &actions)
        guard !applicable.isEmpty else { return }
        let delay = recoveryDelay
        actions.append(.report(.adapterNotRecovered(rounds: history.adapterRecoveries, problem: adapterProblem, retryIn: delay)))
        startTimer(.adapterRecovery, after: delay, &actions)
    }

    /// The next recovery round is due.
    mutating func adapterRecoveryTimerFired(_ actions: inout Actions) {
        guard case .outage(_, .waitingForAdapter) = current else { return }
        runRecovery(recoverySteps, &actions)
    }

    /// An escalation left the adapter off: power it on again, at a doubling pace.
    mutating func powerOnTimerFired(_ actions: inout Actions) {
        guard case .outage(_, .waitingForAdapter(let retries?)) = current, observation.adapterPresent else { return }
        actions.append(.powerOn)
        update(.waitingForAdapter(powerOnRetries: retries + 1))
        startTimer(.powerOn, after: powerOnDelay(afterRetries: retries + 1), &actions)
    }
}
