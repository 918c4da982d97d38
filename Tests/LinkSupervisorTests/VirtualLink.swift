import LinkPolicy
@testable import LinkSupervisor
import Testing

/// Drives a `Supervisor` on a virtual clock: timers it starts become
/// deadlines, and `advance` fires them in order. No real time passes.
struct VirtualLink {
    var supervisor: Supervisor
    var now: Duration = .zero
    var timers: [SupervisorTimer: Duration] = [:]
    /// Every action, with the virtual time it was issued at.
    var log: [(time: Duration, action: SupervisorAction)] = []
    /// What the next connect/subscribe/poll returns, if answered automatically.
    var connectResult: Result<Void, LinkFailure>?
    /// How long a connect takes to be answered (with `connectResult`);
    /// zero: at once. A connect nobody answers ends after the kernel's 20 s,
    /// or Tether's own deadline first.
    var connectLatency: Duration = .zero
    private var pendingConnect: (id: Int, result: Result<Void, LinkFailure>, due: Duration)?
    var answerSubscribes = true
    var pollResult: Result<Void, LinkFailure>? = .success(())
    /// What the next pair returns, if answered automatically; a success
    /// shows the device bonded first (bluetoothd signals Paired before it
    /// replies).
    var pairResult: Result<Void, LinkFailure>? = .success(())
    /// The ids of the last RemoveDevice, controller check and StartDiscovery
    /// asked for, and of each escalation step's last run (kept when the log
    /// is cleared): what the answers below echo.
    var lastRemoval = 0
    var lastControllerCheck = 0
    /// What every controller check is answered at once, if anything (the
    /// daemon's check always answers, within its 5 s): tests that do not
    /// look at the checks but make the supervisor wait on them.
    var controllerCheckAnswer: ControllerCheck?
    var lastDiscovery = 0
    var escalationRuns: [EscalationStep: Int] = [:]

    init(settings: Supervisor.Settings, seed: UInt64 = 1) {
        supervisor = Supervisor(settings: settings, seed: seed)
    }

    static let up = LinkObservation(
        bluezPresent: true, adapterPresent: true, adapterPowered: true, devicePresent: true, connected: true,
        servicesResolved: true, characteristicsReady: true
    )
    static let down = LinkObservation(bluezPresent: true, adapterPresent: true, adapterPowered: true, devicePresent: true)
    /// bluetoothd has no object for the dongle: the supervisor searches.
    static let deviceUnknown = LinkObservation(bluezPresent: true, adapterPresent: true, adapterPowered: true)

    /// A link searching for a dongle bluetoothd does not know, at t=0.
    static func searching(settings: Supervisor.Settings, sourceLocation: SourceLocation = #_sourceLocation) -> VirtualLink {
        var link = VirtualLink(settings: settings)
        link.observe(deviceUnknown)
        #expect(link.state == .searching, sourceLocation: sourceLocation)
        return link
    }

    mutating func send(_ event: SupervisorEvent) {
        let actions = supervisor.handle(event, at: now)
        for action in actions {
            log.append((now, action))
            switch action {
            case .startTimer(let timer, let delay): timers[timer] = now + delay
            case .cancelTimer(let timer): timers[timer] = nil
            case .removeDevice(let id): lastRemoval = id
            case .checkController(let id): lastControllerCheck = id
            case .startDiscovery(let id): lastDiscovery = id
            case .escalate(let step, let run): escalationRuns[step] = run
            default: break
            }
        }
        for action in actions {
            switch action {
            case .connect(let id, _):
                if let result = connectResult, connectLatency > .zero {
                    pendingConnect = (id, result, now + connectLatency)
                } else if let result = connectResult {
                    if case .success = result {
                        // Connecting changes no bond.
                        var up = VirtualLink.up
                        up.deviceBonded = supervisor.observation.deviceBonded
                        observe(up)
                    }
                    send(.connectFinished(attempt: id, result))
                }
            case .pair(let id, _):
                if let result = pairResult {
                    if case .success = result {
                        var bonded = supervisor.observation
                        bonded.deviceBonded = true
                        observe(bonded)
                    }
                    send(.pairFinished(attempt: id, result))
                }
            case .subscribe(let id) where answerSubscribes:
                send(.subscribeFinished(attempt: id, .success(())))
            case .poll(let id, _):
                if let result = pollResult { send(.pollFinished(poll: id, result)) }
            case .checkController(let id):
                if let answer = controllerCheckAnswer { send(.controllerChecked(check: id, answer)) }
            default:
                break
            }
        }
    }

    mutating func observe(_ observation: LinkObservation) { send(.observed(observation)) }

    /// Answers the last RemoveDevice asked for.
    mutating func answerRemoval(_ result: Result<Void, LinkFailure>) {
        send(.removeDeviceFinished(removal: lastRemoval, result))
    }

    /// Answers the last controller check asked for.
    mutating func answerControllerCheck(_ check: ControllerCheck) {
        send(.controllerChecked(check: lastControllerCheck, check))
    }

    /// Finishes the last run of `step` (one never asked for: an id never
    /// handed out, which the supervisor ignores).
    mutating func finishEscalation(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) {
        send(.escalationFinished(step, run: escalationRuns[step] ?? 0, result))
    }

    /// Fails the last StartDiscovery asked for.
    mutating func failDiscovery(_ failure: LinkFailure) {
        send(.discoveryFailed(discovery: lastDiscovery, failure))
    }

    /// The device object asked to go is gone (RemoveDevice answered, the
    /// object removed); a minute of searching later discovery finds the
    /// dongle again, without a bond, and connects now succeed.
    mutating func removedAndFoundAgain(sourceLocation: SourceLocation = #_sourceLocation) {
        answerRemoval(.success(()))
        var gone = VirtualLink.down
        gone.devicePresent = false
        observe(gone)
        advance(by: .seconds(60))
        #expect(state == .searching, sourceLocation: sourceLocation)
        connectResult = .success(())
        observe(VirtualLink.down)
    }

    /// Moves the clock forward, firing due timers in deadline order.
    mutating func advance(by duration: Duration) {
        let end = now + duration
        while true {
            let timer = timers.filter({ $0.value <= end }).min(by: { $0.value < $1.value })
            if let pending = pendingConnect, pending.due <= end, timer.map({ pending.due <= $0.value }) ?? true {
                now = pending.due
                pendingConnect = nil
                send(.connectFinished(attempt: pending.id, pending.result))
                continue
            }
            guard let (timer, deadline) = timer else { break }
            now = deadline
            timers[timer] = nil
            send(.timerFired(timer))
        }
        now = end
    }

    var state: SupervisorState { supervisor.state }

    /// Times at which connect actions were issued.
    /// The supervisor's answers to reconnect requests, in order.
    var answers: [ReconnectAnswer] {
        log.compactMap { if case .answerReconnect(let answer) = $0.action { answer } else { nil } }
    }

    var connectTimes: [Duration] {
        log.compactMap { if case .connect = $0.action { return $0.time } else { return nil } }
    }

    func count(where match: (SupervisorAction) -> Bool) -> Int { log.filter { match($0.action) }.count }

    mutating func clearLog() { log.removeAll() }
}

extension SupervisorAction {
    /// The step of an `.escalate`.
    var escalatedStep: EscalationStep? { if case .escalate(let step, _) = self { step } else { nil } }
    var startsDiscovery: Bool { if case .startDiscovery = self { true } else { false } }
    var removesDevice: Bool { if case .removeDevice = self { true } else { false } }
    var checksController: Bool { if case .checkController = self { true } else { false } }
}
