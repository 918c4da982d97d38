import BlueZ
import Foundation
import LinkCore
import LinkSupervisor
@_spi(FaultInjection) import Readings

/// One seed's run: the real `Supervisor`, the real rules for bluetoothd's
/// answers (`BlueZReplies`, ActionLane's own) and the real `ReadingLog` (on
/// a tmpfs directory) on a virtual monotonic clock, against the model in
/// `World` and `DiskModel`, with faults the seed chooses. One thread; no
/// real time, no sockets, no D-Bus.
///
/// The parts of the daemon that cannot run here yet (`LinkService`,
/// `ActionLane`'s sequencing, `ReadingRecorder`: bound to the event loop's
/// descriptors and timers and to libdbus) are restated in
/// `Simulation+Adapter.swift` and `Simulation+Recorder.swift`, each rule
/// with the daemon's own reason (issue 44 moves the seam to the bus).
///
/// Invariants:
/// - the virtual clock never goes back; events at one instant run in the order scheduled;
/// - everything random comes from `random` (and the disk's own generator, seeded from the same seed);
/// - the invariants (`Invariant`) are checked after every step; the first violation ends the run.
final class Simulation {
    let seed: UInt64
    let settings: SimulationSettings
    let duration: Duration
    let directory: String

    var random: SimulationRandom
    var agenda = EventQueue<SimulationEvent>()
    var now: Duration = .zero
    var world = World()
    let disk: DiskModel
    var trace = Trace()
    var checker: InvariantChecker
    var violation: Violation?

    // MARK: The Tether process

    var supervisor: Supervisor
    var tetherAlive = false
    var incarnation = 0
    var timerGenerations = [UInt64](repeating: 0, count: SupervisorTimer.allCases.count)
    var timerGenerationBase: UInt64 = 0
    var queuedEvents: [SupervisorEvent] = []
    var handlingEvent = false
    /// The observation last handed to this process's supervisor.
    var lastObservation: LinkObservation?
    var log: ReadingLog?
    var recorder = RecorderState()
    /// The escalation step in flight in this process (the daemon's own
    /// `EscalationRun`), and its timer's generation (a cancelled timer's
    /// event finds it moved on).
    var escalation = EscalationRun()
    var escalationTimerGeneration: UInt64 = 0
    /// The supervisor's id for the step in flight, which its verdict echoes.
    var escalationRun = 0
    /// The last connect id this process sent (to tell its reply from a stale one).
    var lastConnectID = 0
    /// Connects bluetoothd has yet to answer: by token, the connect's id and process.
    var pendingReplies: [UInt64: (id: Int, incarnation: Int)] = [:]

    // MARK: Faults

    var faultCounts = [Int](repeating: 0, count: FaultKind.allCases.count)
    /// Faults under way (not instantaneous), by kind.
    var ongoing = [Int](repeating: 0, count: FaultKind.allCases.count)
    var ongoingTotal = 0
    var recoveryGeneration: UInt64 = 0
    var lastClearAt: Duration?
    var longestRecovery: Duration = .zero
    /// Added to the virtual monotonic time to make the wall clock (readings' timestamps).
    var wallOffset: Duration = .zero
    var nextToken: UInt64 = 0
    var linkToken: UInt64 = 0
    var advertisementGeneration: UInt64 = 0
    /// Faults stop being injected this long before the end: the run ends recovered, then stops.
    var faultsUntil: Duration

    // MARK: Readings

    var audit = LogAudit()
    var delivered: UInt64 = 0

    init(seed: UInt64, duration: Duration, directory: String) {
        self.seed = seed
        self.duration = duration
        self.directory = directory
        var random = SimulationRandom(seed: seed)
        settings = SimulationSettings(random: &random)
        self.random = random
        disk = DiskModel(seed: seed ^ 0xD15C)
        supervisor = Supervisor(settings: settings.supervisor, seed: seed)
        checker = InvariantChecker(settings: settings)
        faultsUntil = duration - settings.recoveryBound - .seconds(120)
    }

    /// Runs to the end or the first violation.
    func run() -> Violation? {
        try? FileManager.default.removeItem(atPath: directory)
        agenda.schedule(.tetherStarts, at: .zero)
        agenda.schedule(.dongleBurst, at: random.duration(.zero ... settings.burstPeriod))
        agenda.schedule(.nextFault, at: random.exponential(mean: settings.faultEvery))
        agenda.schedule(.end, at: duration)
        while violation == nil, let (time, event) = agenda.popNext() {
            now = time
            if case .end = event {
                finish()
                break
            }
            step(event)
            checker.checkStep(self)
        }
        if violation == nil { audit.finalCheck(self) }
        log?.close()
        log = nil
        // DST_KEEP_LOGS=1 keeps the seed's readings log for a look (replaying one seed).
        if ProcessInfo.processInfo.environment["DST_KEEP_LOGS"] == nil {
            try? FileManager.default.removeItem(atPath: directory)
        }
        return violation
    }

    func schedule(_ event: SimulationEvent, after delay: Duration) {
        agenda.schedule(event, at: now + max(delay, .zero))
    }

    func record(_ item: TraceItem) { trace.record(item, at: now) }

    func violated(_ invariant: Invariant, _ detail: String) {
        guard violation == nil else { return }
        violation = Violation(invariant: invariant, at: now, detail: detail)
    }

    func token() -> UInt64 {
        nextToken += 1
        return nextToken
    }

    private func step(_ event: SimulationEvent) {
        switch event {
        case .supervisorTimer(let timer, let generation):
            guard tetherAlive, timerGenerations[timer.slot] == generation else { return }
            deliver(.timerFired(timer))
        case .connectOutcome(let token, let result, let replies):
            connectOutcome(token: token, result, replies: replies)
        case .connectNoReply(let id, let incarnation):
            reply(connect: id, incarnation: incarnation, .failure(BlueZError(name: "org.freedesktop.DBus.Error.NoReply", message: "Did not receive a reply")))
        case .subscribeOutcome(let id, let incarnation, let linkToken, let gattGeneration):
            subscribeOutcome(id: id, incarnation: incarnation, linkToken: linkToken, gattGeneration: gattGeneration)
        case .pollOutcome(let id, let incarnation, let result):
            guard tetherAlive, incarnation == self.incarnation else { return }
            deliver(.pollFinished(poll: id, BlueZReplies.poll(result)))
        case .servicesResolved(let token):
            guard token == linkToken, world.connected else { return }
            world.servicesResolved = true
            world.characteristicsReady = true
            record(.world("services resolved"))
            publishObservation()
        case .characteristicsBack(let generation):
            guard generation == world.gattGeneration, world.connected, world.servicesResolved else { return }
            world.characteristicsReady = true
            record(.world("the new GATT objects are exported"))
            publishObservation()
        case .escalationStepReturns(let step, let incarnation):
            escalationStepReturns(step, incarnation: incarnation)
        case .escalationPowered(let on, let incarnation):
            escalationPowered(on, incarnation: incarnation)
        case .escalationTimer(let generation):
            escalationTimerFired(generation: generation)
        case .dongleBurst:
            dongleBurst()
        case .advertisement(let generation):
            advertisement(generation: generation)
        case .removalSignalled:
            signalRemoval()
        case .nextFault:
            injectFault()
        case .faultEnds(let kind):
            endFault(kind)
        case .tetherStarts:
            startTether()
        case .recorderSync(let generation):
            recorderSync(generation: generation)
        case .recorderRetry(let generation):
            recorderRetry(generation: generation)
        case .recoveryCheck(let generation):
            checker.checkRecovery(self, generation: generation)
        case .end:
            break
        }
    }

    /// The end: every fault has cleared; Tether is stopped (SIGTERM) and must drain.
    private func finish() {
        record(.tether("end of the run: stopping"))
        if tetherAlive { stopTether(graceful: true) }
    }
}

extension FaultKind {
    var index: Int { Self.indices[self] }
    private static let indices = IndexTable<FaultKind>()
}
