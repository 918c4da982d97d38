import Configuration
import DBus
import DurationUnits
import EventLoop
import Foundation
import Logging
import Readings
import Simulator
@_spi(Simulation) import TetherDaemon

/// One seed's run: the daemon from the bus up (its session, link service,
/// BlueZ monitor and client, action lane, supervisor, recorder and readings
/// log, all as they run on a gateway) against the project's simulated
/// bluetoothd (`Simulator`), through an in-process model of dbus-daemon
/// (`InProcessBusDaemon`), every process on a virtual loop of its own and
/// one virtual clock (`VirtualLoops`), with faults the seed chooses. One
/// thread; no real time, no sockets; nothing of the daemon restated.
///
/// The processes: the bus daemon, bluetoothd's main loop (frozen when it
/// hangs), the simulator's own loop (the dongle, the air, the controller),
/// the world's (faults, an operator's `tether reconnect`, a local attacker)
/// and one Tether at a time (killed: its loop is dropped; started again: a
/// new one).
///
/// Invariants:
/// - the virtual clock never goes back; what is due at one instant runs at
///   that instant, the loops in a fixed order;
/// - everything random comes from the seed (`random`, the disk's and the
///   simulator's own generators seeded from it; hashing is deterministic:
///   `tether-dst` runs with SWIFT_DETERMINISTIC_HASHING);
/// - the invariants (`Invariant`) are checked as things happen and after
///   every instant; the first violation ends the run.
///
/// Threading: confined to the thread that runs it; `@unchecked Sendable` so
/// that the callbacks of the processes it runs (all on that thread) may
/// reach it.
final class Simulation: @unchecked Sendable {
    let seed: UInt64
    let settings: SimulationSettings
    let duration: Duration
    let directory: String
    let config: TetherConfig

    var random: SimulationRandom
    /// The operator's own draws (`removalAnswered`), apart from `random`, so
    /// that runs without a removal draw as they did before it existed.
    var operatorRandom: SimulationRandom
    /// bluetoothd's InterfacesRemoved after a RemoveDevice's reply, this seed.
    let removalSignalDelay: Duration
    let loops: VirtualLoops
    let startInstant: MonotonicInstant
    let busLoop: EventLoop
    let simulatorLoop: EventLoop
    let bluetoothdLoop: EventLoop
    let worldLoop: EventLoop
    let busDaemon: InProcessBusDaemon
    private(set) var simulator: Simulator?
    let disk: DiskModel
    var trace = Trace()
    var checker: InvariantChecker
    var violation: Violation?

    // MARK: Tether

    private(set) var tether: SimulatedTether?
    var incarnation = 0
    /// Added to virtual time to make the wall clock (readings' timestamps).
    var wallOffset: Duration = .zero

    // MARK: Faults

    var faultCounts = [Int](repeating: 0, count: FaultKind.allCases.count)
    var ongoing = [Int](repeating: 0, count: FaultKind.allCases.count)
    var ongoingTotal = 0
    var recoveryGeneration: UInt64 = 0
    var lastClearAt: Duration?
    var longestRecovery: Duration = .zero
    /// Faults stop this long before the end: the run ends recovered, then stops.
    let faultsUntil: Duration
    var adapterIndex = 0

    // MARK: Readings

    var audit = LogAudit()
    /// Sequence numbers of the dongle's notifications that went to Tether, and when.
    var delivered: UInt64 = 0

    init(seed: UInt64, duration: Duration, directory: String) throws {
        self.seed = seed
        self.duration = duration
        self.directory = directory
        var random = SimulationRandom(seed: seed)
        settings = SimulationSettings(random: &random)
        self.random = random
        operatorRandom = SimulationRandom(seed: seed ^ 0x0BE7_A70E)
        // Drawn apart from `random` too: the settings' draws stay as they were.
        var removalRandom = SimulationRandom(seed: seed ^ 0x5E1D)
        removalSignalDelay = removalRandom.duration(.milliseconds(1) ... .seconds(1))
        config = try TetherConfig.parse(settings.configText(directory: directory), file: "dst-seed-\(seed).toml")
        loops = VirtualLoops()
        startInstant = loops.now
        busLoop = loops.makeLoop(named: "dbus-daemon")
        bluetoothdLoop = loops.makeLoop(named: "bluetoothd")
        simulatorLoop = loops.makeLoop(named: "simulator")
        worldLoop = loops.makeLoop(named: "world")
        busDaemon = InProcessBusDaemon(loop: busLoop)
        disk = DiskModel(seed: seed ^ 0xD15C)
        checker = InvariantChecker(settings: settings)
        faultsUntil = duration - settings.recoveryBound - .seconds(120)
    }

    /// Virtual time since the run began.
    var now: Duration { startInstant.duration(to: loops.now) }

    /// The wall clock: it jumps with `wallOffset`.
    var wallClock: Date {
        Date(timeIntervalSince1970: Double(Self.bootWallMilliseconds) / 1000 + Double((now + wallOffset).wholeMilliseconds) / 1000)
    }

    /// The wall clock's reading when the run began (the simulated boot), in
    /// milliseconds since 1970.
    static let bootWallMilliseconds: Int64 = 1_800_000_000_000

    /// The simulated gateway booted when the run began and never reboots
    /// (a daemon killed and started again keeps the boot); its clock counts
    /// as synchronised while the wall clock has not been moved.
    var bootClock: BootClock {
        let bootID = String(format: "00000000-0000-4000-8000-%012llx", seed & 0xFFFF_FFFF_FFFF)
        return BootClock { [self] in BootStamp(bootID: bootID, sinceBoot: now, clockSynchronised: wallOffset == .zero) }
    }

    /// Runs to the end or the first violation.
    func run() -> Violation? {
        try? FileManager.default.removeItem(atPath: directory)
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        busDaemon.assumeIsolated { bus in
            bus.tapDeliveries { [self] message in
                checker.routed(message, self)
                if trace.wantsRoutine || !TraceItem.bus(message).isRoutine { record(.bus(message)) }
            }
        }
        onWorld { simulation in
            await simulation.startSimulator()
            simulation.startTether()
            await simulation.runFaults()
        }
        let end = startInstant + duration
        while violation == nil, loops.step(notAfter: end) {
            afterInstant()
        }
        if violation == nil { finish() }
        if violation == nil { audit.finalCheck(self) }
        tether?.kill(loops: loops, busDaemon: busDaemon)
        // DST_KEEP_LOGS=1 keeps the seed's readings log for a look (replaying one seed).
        if ProcessInfo.processInfo.environment["DST_KEEP_LOGS"] == nil {
            try? FileManager.default.removeItem(atPath: directory)
        }
        return violation
    }

    /// Runs `body` as a task on the world's loop (the simulation's own
    /// process: faults, an operator, an attacker).
    func onWorld(_ body: @escaping @Sendable (Simulation) async -> Void) {
        Task(executorPreference: worldLoop) { [self] in await body(self) }
    }

    func record(_ item: TraceItem) { trace.record(item, at: now) }

    func violated(_ invariant: Invariant, _ detail: String) {
        guard violation == nil else { return }
        violation = Violation(invariant: invariant, at: now, detail: detail)
        record(.world("VIOLATION \(invariant.rawValue): \(detail)"))
    }

    /// After everything due at an instant ran: the checks, and a Tether that
    /// died in a write is killed.
    private func afterInstant() {
        if disk.diedInWrite, let tether, !tether.ended {
            record(.tether("killed inside a write(2)"))
            killTether()
            endOngoing(.tetherKilledMidWrite)
            scheduleTetherStart(after: random.duration(.seconds(1) ... .seconds(5)))
        }
        checker.checkInstant(self)
    }

    // MARK: The processes

    private func startSimulator() async {
        var options = settings.simulatorOptions
        options.removalSignalDelay = removalSignalDelay
        options.eventObserver = { [self] event in checker.simulatorEvent(event, self) }
        let busDaemon = busDaemon
        let loops = self.loops
        checker.count(.simulationSetUp)
        do {
            simulator = try await Simulator.start(
                connect: { loop throws(DBusError) in try await Bus.connect(to: busDaemon, on: loop) },
                loops: SimulatorLoops(
                    simulator: simulatorLoop, bluetoothd: bluetoothdLoop,
                    freeze: { loop, duration in loops.freeze(loop, until: loop.now + duration) }),
                options: options)
        } catch {
            violated(.simulationSetUp, "the simulated bluetoothd did not start: \(error)")
        }
    }

    /// A Tether process starts: a fresh daemon, its log recovered.
    func startTether() {
        guard tether == nil || tether?.ended == true, let simulator else { return }
        incarnation += 1
        disk.resetAfterDeath()
        let loop = loops.makeLoop(named: "tether-\(incarnation)")
        let logger = Logger(label: "tether") { _ in TraceLogHandler(simulation: self) }
        do {
            tether = try SimulatedTether(
                incarnation: incarnation, loop: loop, config: config, disk: disk, busDaemon: busDaemon,
                kernel: SimulatedControllerKernel(simulator: simulator, loop: loop, permitted: settings.controllerCommandsPermitted), seed: seed &+ UInt64(incarnation),
                logger: logger, wallClock: { [self] in wallClock }, bootClock: bootClock,
                observe: { [self] decision in checker.decided(decision, self) },
                connected: { [self] name in checker.tetherConnected(as: name) })
        } catch {
            // On the model's tmpfs a log that cannot be opened is the simulation's own fault.
            loops.remove(loop)
            return violated(.readingsExactlyOnce, "the readings log cannot be opened after a restart: \(error)")
        }
        record(.tether("started (process \(incarnation)); log: \(relative(tether?.log.recovery.description ?? ""))"))
        audit.check(self)
        checker.processStarted(self)
        endOngoing(.tetherKilled)
        endOngoing(.tetherRestarted)
    }

    /// SIGKILL: nothing is written, closed or cancelled.
    func killTether() {
        guard let tether, !tether.ended else { return }
        checker.processKilled(self, tether)
        tether.kill(loops: loops, busDaemon: busDaemon)
        checker.processEnded()
    }

    /// SIGTERM: the daemon drains and leaves.
    func stopTether() async {
        guard let tether, !tether.ended else { return }
        record(.tether("stopping (SIGTERM)"))
        let unwritten = await tether.stop(loops: loops)
        checker.count(.stopDrains)
        if unwritten > 0, !disk.full, !disk.failing {
            violated(.stopDrains, "\(unwritten) readings unwritten at stop with a working disk")
        }
        if unwritten > 0 { checker.readingsLostAtStop(self) }
        record(.tether("stopped"))
        checker.processEnded()
    }

    /// bluetoothd answered a RemoveDevice of Tether's (the stale-object
    /// repair). Its InterfacesRemoved follows from its idle loop, up to a
    /// second later; an operator who runs `tether reconnect` then (having
    /// read "removing the stale device" in the journal) makes Tether decide
    /// an attempt inside that gap, which nothing else in a run does: there
    /// Tether must not believe the object it had removed is still there.
    func removalAnswered() {
        guard faultsUntil > now, operatorRandom.chance(0.5) else { return }
        let delay = operatorRandom.duration(.zero ... .milliseconds(300))
        worldLoop.schedule(after: delay) { [self] in
            record(.faultStarts(.reconnectRequest, "right after a RemoveDevice was answered"))
            onWorld { await $0.requestReconnect() }
        }
    }

    func scheduleTetherStart(after delay: Duration) {
        worldLoop.schedule(after: delay) { [self] in startTether() }
    }

    /// The end: faults have cleared; Tether is stopped (SIGTERM) and must drain.
    private func finish() {
        record(.tether("end of the run: stopping"))
        let stopped = LoopBox(Flag())
        onWorld { simulation in
            await simulation.stopTether()
            stopped.value.raised = true
        }
        let deadline = loops.now + .seconds(120)
        while !stopped.value.raised, violation == nil, loops.step(notAfter: deadline) {}
        if !stopped.value.raised, violation == nil { violated(.stopDrains, "Tether did not stop within 120 s of SIGTERM") }
    }

    /// `text` without the run's directory (it holds the process id): traces are the same on every run.
    func relative(_ text: String) -> String {
        text.replacingOccurrences(of: directory + "/", with: "")
    }
}

// MARK: What the checks read of the processes

extension Simulation {
    /// org.bluez's owner on the bus now (bluetoothd's connection), if any.
    var bluezOwner: String? {
        busDaemon.assumeIsolated { $0.owner(of: "org.bluez") }
    }

    /// bluetoothd's main loop is hung (frozen).
    var bluetoothdHung: Bool { loops.isFrozen(bluetoothdLoop) }

    /// The dongle holds a link (as the dongle sees it).
    var dongleConnected: Bool {
        simulator?.assumeIsolated { $0.state == .connected } ?? false
    }
}

/// A flag raised by work on one of the simulation's loops, read by its driver.
final class Flag {
    var raised = false
}
