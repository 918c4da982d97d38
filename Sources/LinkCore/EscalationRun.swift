import DBus
import LinkPolicy
import LinkSupervisor

/// One escalation step, from its first call to its verdict: the part of
/// the run that talks to bluetoothd (a power cycle's calls and pauses) and
/// the wait that follows every step until the adapter shows it worked.
///
/// The verdict waits for the adapter, not for the calls: a step is done
/// when bluetoothd shows the adapter powered (and not blocked) again, so the
/// supervisor judges the result, not a race; at most `adapterWait` (10 s)
/// after the calls. A USB step makes the kernel re-probe the controller:
/// its adapter must go away first (the old one, still listed for a moment,
/// proves nothing), within `reprobeWait`. A USB step or an rfkill unblock
/// that failed changed nothing to wait for.
///
/// A power cycle: `Powered=false`, `powerOffPause`, `Powered=true`, tried
/// `powerOnAttempts` times `powerOnRetryPause` apart, whatever the power-off
/// answered: a wedged controller is why we are here, and the adapter must
/// end up on. The other steps (an HCI reset, a USB reset or rebind, an
/// rfkill unblock) are run by the link service, off the loop when they
/// block; it reports their calls done with `stepCallsDone`.
///
/// Invariants: at most one step is in flight, and one timer (a pause or
/// the deadline) runs for it; every step begun ends in exactly one
/// `.finished`, unless `cancel` ends the run; answers for a phase the run
/// has left are ignored. Pure: the lane carries out the effects (the
/// deterministic simulation too) and feeds back the answers, the timer and
/// the adapter's state.
public struct EscalationRun: Sendable {
    public static let powerOffPause: Duration = .milliseconds(500)
    public static let powerOnRetryPause: Duration = .seconds(1)
    public static let powerOnAttempts = 3
    /// How long a step's result waits for the adapter to show powered.
    public static let adapterWait: Duration = .seconds(10)
    /// How long a USB step waits for the controller to come back: the
    /// kernel's re-probe, bluetoothd's Index Added and its power-on take
    /// 1 to 4 s in `make e2e`.
    public static let reprobeWait: Duration = .seconds(15)

    public enum Effect: Sendable {
        /// Adapter1.Powered on `adapter`; its answer goes to `poweredAnswered`.
        case setPowered(ObjectPath, Bool)
        /// Starts the run's timer (replacing any); its firing goes to `timerFired`.
        case startTimer(Duration)
        case cancelTimer
        /// The step's verdict, for the supervisor (`.escalationFinished`).
        case finished(EscalationStep, Result<Void, LinkFailure>)
    }

    /// What the run needs to know of the adapter, as bluetoothd shows it.
    public struct Adapter: Sendable, Equatable {
        public var powered: Bool
        public var blocked: Bool
        public init(powered: Bool, blocked: Bool) {
            self.powered = powered
            self.blocked = blocked
        }
    }

    private enum Phase {
        case poweringOff(ObjectPath)
        case pausedOff(ObjectPath, offResult: Result<Void, LinkFailure>)
        case poweringOn(ObjectPath, attempt: Int, offResult: Result<Void, LinkFailure>)
        case pausedBeforePowerOn(ObjectPath, attempt: Int, offResult: Result<Void, LinkFailure>)
        /// The link service runs the step's calls.
        case runByService
        /// The calls are done; the deadline runs.
        case awaitingAdapter(Result<Void, LinkFailure>)
    }

    private struct InFlight {
        var step: EscalationStep
        var phase: Phase
        /// The adapter was seen unpowered or gone since the step began.
        var adapterWentAway: Bool
    }

    private var inFlight: InFlight?
    private var adapter = Adapter(powered: false, blocked: false)

    public init() {}

    /// The step in flight, if any.
    public var step: EscalationStep? { inFlight?.step }

    /// Begins `step`; `adapterPath` is the adapter's object (nil: none).
    public mutating func begin(_ step: EscalationStep, adapterPath: ObjectPath?, adapter: Adapter) -> [Effect] {
        var effects: [Effect] = inFlight == nil ? [] : [.cancelTimer]
        self.adapter = adapter
        inFlight = InFlight(step: step, phase: .runByService, adapterWentAway: !adapter.powered)
        guard step == .powerCycle else { return effects }
        guard let adapterPath else {
            inFlight = nil
            return effects + [.finished(step, .failure(LinkFailure(.transient, "no adapter")))]
        }
        inFlight?.phase = .poweringOff(adapterPath)
        effects.append(.setPowered(adapterPath, false))
        return effects
    }

    /// bluetoothd answered the run's last `setPowered`.
    public mutating func poweredAnswered(_ result: Result<Void, LinkFailure>) -> [Effect] {
        guard let phase = inFlight?.phase else { return [] }
        switch phase {
        case .poweringOff(let path):
            inFlight?.phase = .pausedOff(path, offResult: result)
            return [.startTimer(Self.powerOffPause)]
        case .poweringOn(let path, let attempt, let offResult):
            switch result {
            case .success:
                return callsDone(offResult)
            case .failure where attempt < Self.powerOnAttempts:
                inFlight?.phase = .pausedBeforePowerOn(path, attempt: attempt + 1, offResult: offResult)
                return [.startTimer(Self.powerOnRetryPause)]
            case .failure(let failure):
                return callsDone(.failure(failure))
            }
        case .pausedOff, .pausedBeforePowerOn, .runByService, .awaitingAdapter:
            return []
        }
    }

    /// The run's timer fired.
    public mutating func timerFired() -> [Effect] {
        guard let phase = inFlight?.phase else { return [] }
        switch phase {
        case .pausedOff(let path, let offResult):
            inFlight?.phase = .poweringOn(path, attempt: 1, offResult: offResult)
            return [.setPowered(path, true)]
        case .pausedBeforePowerOn(let path, let attempt, let offResult):
            inFlight?.phase = .poweringOn(path, attempt: attempt, offResult: offResult)
            return [.setPowered(path, true)]
        case .awaitingAdapter(let result):
            return finish(result)
        case .poweringOff, .poweringOn, .runByService:
            return []
        }
    }

    /// The link service's calls for `step` (not a power cycle) are done.
    public mutating func stepCallsDone(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) -> [Effect] {
        guard let inFlight, inFlight.step == step, case .runByService = inFlight.phase else { return [] }
        return callsDone(result)
    }

    /// bluetoothd shows the adapter changed (or gone: not powered).
    public mutating func adapterChanged(_ adapter: Adapter) -> [Effect] {
        self.adapter = adapter
        guard let inFlight else { return [] }
        if !adapter.powered { self.inFlight?.adapterWentAway = true }
        guard case .awaitingAdapter(let result) = inFlight.phase, adapterBack else { return [] }
        return [.cancelTimer] + finish(result)
    }

    /// Ends the run without a verdict (the service is ending).
    public mutating func cancel() -> [Effect] {
        guard inFlight != nil else { return [] }
        inFlight = nil
        return [.cancelTimer]
    }

    private mutating func callsDone(_ result: Result<Void, LinkFailure>) -> [Effect] {
        guard let step = inFlight?.step else { return [] }
        if case .failure = result, step.reprobesController || step == .rfkillUnblock { return finish(result) }
        if adapterBack { return finish(result) }
        inFlight?.phase = .awaitingAdapter(result)
        #if DST_BUG_ESCALATION_WITHOUT_DEADLINE  // planted bug (make dst-selftest)
        return []
        #else
        return [.startTimer(step.reprobesController ? Self.reprobeWait : Self.adapterWait)]
        #endif
    }

    /// The adapter powered and unblocked, and a USB step's adapter went away first.
    private var adapterBack: Bool {
        guard let inFlight, adapter.powered, !adapter.blocked else { return false }
        return !inFlight.step.reprobesController || inFlight.adapterWentAway
    }

    private mutating func finish(_ result: Result<Void, LinkFailure>) -> [Effect] {
        guard let step = inFlight?.step else { return [] }
        inFlight = nil
        return [.finished(step, result)]
    }
}

extension EscalationRun.Effect: Equatable {
    /// `Result<Void, _>` cannot be Equatable (Void is no nominal type), so
    /// verdicts compare by outcome: both succeeded, or the same failure.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.setPowered(let a, let x), .setPowered(let b, let y)): a == b && x == y
        case (.startTimer(let a), .startTimer(let b)): a == b
        case (.cancelTimer, .cancelTimer): true
        case (.finished(let a, let x), .finished(let b, let y)): a == b && x.failure == y.failure
        default: false
        }
    }
}

extension Result where Success == Void, Failure == LinkFailure {
    /// The failure, nil on success: lets a `Result<Void, LinkFailure>` be compared.
    public var failure: LinkFailure? {
        if case .failure(let failure) = self { failure } else { nil }
    }
}
