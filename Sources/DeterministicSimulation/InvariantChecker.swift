import BlueZ
import LinkSupervisor
import Pacing

/// Checks the invariants (`Invariant`) as the run goes: around each event the
/// supervisor handles, before each action is carried out, and after every
/// step of the agenda. Counts every check made.
///
/// It judges from what it sees, never from the code under test's own
/// predicates (a planted bug in `LinkObservation.linkReady` must not blind it).
struct InvariantChecker {
    let settings: SimulationSettings
    private(set) var checks = [Int](repeating: 0, count: Invariant.allCases.count)

    /// The observation last handed to the supervisor.
    private var seen = LinkObservation()
    /// A Connect was answered with a needs-cancel error; no Disconnect since.
    private var cancelOwed: String?
    /// The supervisor was told its RemoveDevice succeeded; no observation
    /// without the device since (bluetoothd's InterfacesRemoved).
    private var removalAnswered = false
    /// The supervisor has been subscribed (waiting-for-data or online) since.
    private var subscribedSince: Duration?
    private var lastPollAt: Duration = .zero
    private var lastDataAt: Duration?
    private var lastAttempt = 0
    private var windowFirstAttemptAt: Duration = .zero
    private var callSecond: Int64 = -1
    private var callsThisSecond = 0

    init(settings: SimulationSettings) { self.settings = settings }

    mutating func count(_ invariant: Invariant) {
        checks[invariant.index] += 1
    }

    var totalChecks: Int { checks.reduce(0, +) }

    // MARK: Process lifetime

    mutating func processStarted(_ simulation: Simulation) {
        seen = LinkObservation()
        cancelOwed = nil
        removalAnswered = false
        subscribedSince = nil
        lastDataAt = nil
        lastAttempt = 0
    }

    mutating func processEnded() {
        subscribedSince = nil
        cancelOwed = nil
        lastDataAt = nil
    }

    // MARK: Around the supervisor

    mutating func willHandle(_ event: SupervisorEvent, _ simulation: Simulation) {
        switch event {
        case .observed(let observation):
            seen = observation
            if !observation.devicePresent { removalAnswered = false }
        case .removeDeviceFinished(_, .success): removalAnswered = true
        case .dataReceived: lastDataAt = simulation.now
        case .reconnectRequested: lastAttempt = 0  // a person's request starts a fresh window
        default: break
        }
    }

    /// `before`: the supervisor's status before the step that handled `event` and decided `actions`.
    mutating func handled(
        _ simulation: Simulation, event: SupervisorEvent, statusBefore before: Supervisor.Status, actions: [SupervisorAction]
    ) {
        count(.statusTold)
        if Supervisor.leavesStatusAsItWas(event, deciding: actions), simulation.supervisor.status != before {
            simulation.violated(
                .statusTold,
                "the status changed (\(before) → \(simulation.supervisor.status)) in a step said to leave it: \(event), deciding \(actions)")
        }
        let state = simulation.supervisor.state
        if state == .online || state == .waitingForData {
            if subscribedSince == nil {
                subscribedSince = simulation.now
                lastPollAt = simulation.now
            }
        } else {
            subscribedSince = nil
        }
    }

    /// A Connect of the current attempt was refused with an error that needs
    /// a Disconnect first (by BlueZ's classification, not the adapter's mapping).
    mutating func connectAnswered(id: Int, error: BlueZError, _ simulation: Simulation) {
        guard id == simulation.lastConnectID, simulation.supervisor.state == .connecting,
              error.disposition == .needsCancel
        else { return }
        cancelOwed = error.description
    }

    mutating func disconnectSent() { cancelOwed = nil }

    mutating func willPerform(_ action: SupervisorAction, _ simulation: Simulation) {
        let now = simulation.now
        switch action {
        case .connect(let id, _):
            countCall(simulation)
            count(.callOrder)
            if let pending = simulation.world.pendingConnect, pending.incarnation == simulation.incarnation {
                simulation.violated(.callOrder, "Connect #\(id) while Connect #\(pending.id) of this process is pending in bluetoothd")
            } else if let owed = cancelOwed {
                simulation.violated(.callOrder, "Connect #\(id) without a Disconnect after a Connect answered \(owed)")
            } else if !seen.bluezPresent || !seen.adapterPresent || !seen.adapterPowered {
                simulation.violated(.callOrder, "Connect #\(id) while the supervisor saw bluetoothd or the adapter unusable")
            } else if removalAnswered, !simulation.world.deviceObject {
                simulation.violated(.callOrder, "Connect #\(id) on the device object its RemoveDevice removed, before bluetoothd's InterfacesRemoved")
            }
        case .subscribe(let id):
            countCall(simulation)
            count(.callOrder)
            if !(seen.connected && seen.servicesResolved && seen.characteristicsReady) {
                simulation.violated(
                    .callOrder,
                    "subscribe #\(id) on a link seen connected=\(seen.connected) resolved=\(seen.servicesResolved) characteristics=\(seen.characteristicsReady)"
                )
            }
        case .poll, .pollWithoutReply:
            countCall(simulation)
            count(.callOrder)
            let state = simulation.supervisor.state
            if state != .online && state != .waitingForData {
                let poll = if case .poll(let id, _) = action { "#\(id)" } else { "without reply" }
                simulation.violated(.callOrder, "keep-alive poll \(poll) in state \(state.rawValue)")
            }
            lastPollAt = now
        case .disconnect, .startDiscovery, .stopDiscovery, .escalate, .powerOn, .removeDevice:
            countCall(simulation)
        case .report(.reconnectAttempt(let attempt, _)):
            count(.retryWindowBounded)
            if attempt <= lastAttempt || lastAttempt == 0 { windowFirstAttemptAt = now }
            lastAttempt = attempt
            let policy = settings.supervisor.policy
            if attempt > policy.windowAttempts {
                simulation.violated(.retryWindowBounded, "attempt \(attempt) of a window of \(policy.windowAttempts)")
            } else if now - windowFirstAttemptAt >= policy.window {
                simulation.violated(
                    .retryWindowBounded,
                    "attempt \(attempt) comes \((now - windowFirstAttemptAt).simulationStamp) after the window's first (window \(policy.window.roundedText))"
                )
            }
        case .report(.connected), .report(.windowExhausted), .report(.dongleAway):
            lastAttempt = 0
        default:
            break
        }
    }

    private mutating func countCall(_ simulation: Simulation) {
        count(.boundedActions)
        let second = simulation.now.milliseconds / 1000
        if second != callSecond {
            callSecond = second
            callsThisSecond = 0
        }
        callsThisSecond += 1
        if callsThisSecond > Invariant.maximumCallsPerSecond {
            simulation.violated(.boundedActions, "\(callsThisSecond) calls to bluetoothd within one simulated second")
        }
    }

    // MARK: After every step

    mutating func checkStep(_ simulation: Simulation) {
        let now = simulation.now
        guard simulation.tetherAlive else { return }
        let state = simulation.supervisor.state

        count(.keepaliveGap)
        if let since = subscribedSince, simulation.world.connected, settings.supervisor.keepaliveEnabled {
            let gap = now - max(lastPollAt, since)
            if gap > settings.supervisor.keepaliveInterval + Invariant.keepaliveSlack {
                simulation.violated(.keepaliveGap, "no keep-alive for \(gap.simulationStamp) while \(state.rawValue)")
            }
        }

        count(.dongleNeverSleeps)
        let world = simulation.world
        if world.connected, world.dongleReachable, now - world.dongleLastHeard > settings.sleepAfter {
            simulation.world.dongleFellAsleep = true
            simulation.world.dropLink()
            simulation.record(.world("the dongle fell asleep"))
            simulation.violated(.dongleNeverSleeps, "nothing written to the dongle for \((now - world.dongleLastHeard).simulationStamp) while connected (\(state.rawValue))")
        }

        count(.onlineOnlyWhileDataFlows)
        if state == .online, let limit = settings.supervisor.silenceLimit {
            let silent = lastDataAt.map { now - $0 }
            if silent.map({ $0 > limit + Invariant.silenceSlack }) ?? true {
                simulation.violated(
                    .onlineOnlyWhileDataFlows,
                    "online with no notification for \(silent?.simulationStamp ?? "ever") (silence limit \(limit.roundedText))"
                )
            }
        }
    }

    /// Every fault cleared `recoveryBound` ago (and none since): Tether must be online.
    mutating func checkRecovery(_ simulation: Simulation, generation: UInt64) {
        guard generation == simulation.recoveryGeneration, simulation.tetherAlive else { return }
        count(.recoversAfterFaults)
        if simulation.supervisor.state != .online {
            simulation.violated(
                .recoversAfterFaults,
                "\(simulation.supervisor.state.rawValue), \(simulation.settings.recoveryBound.simulationStamp) after the last fault cleared"
            )
        }
    }
}

extension Invariant {
    /// Its place in `allCases` (a table: this runs millions of times per seed).
    var index: Int { Self.indices[self] }

    private static let indices = IndexTable<Invariant>()
}

/// The position of each case of a small enum in `allCases`, looked up by
/// hash once per case instead of a linear search per call.
struct IndexTable<Case: CaseIterable & Hashable & Sendable>: Sendable {
    private let table: [Case: Int]

    init() {
        var table: [Case: Int] = [:]
        for (index, value) in Case.allCases.enumerated() { table[value] = index }
        self.table = table
    }

    subscript(_ value: Case) -> Int { table[value] ?? 0 }
}
