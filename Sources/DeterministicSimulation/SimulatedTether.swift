import Configuration
import ControlAPI
import DBus
import EventLoop
import Foundation
import Logging
@_spi(FaultInjection) import Readings
import Simulator
import Systemd
@_spi(Simulation) import TetherDaemon

/// One `tether run` process in the simulation: the daemon's own session
/// (`DaemonSession`: the bus connection, remade when the bus goes, the link
/// service, the control object), its readings log and recorder, on a
/// virtual loop of its own, connected to the simulation's bus like any
/// client. What `DaemonRunner.run` adds around the session on a gateway
/// (signals, systemd, metrics) is not here; its stop is (`stop`).
///
/// Threading: confined to the simulation's driving thread, which is every
/// virtual loop's; `@unchecked Sendable` so that the session's callbacks,
/// which run on the process's loop, may reach it.
final class SimulatedTether: @unchecked Sendable {
    let incarnation: Int
    let loop: EventLoop
    let log: ReadingLog
    let recorder: ReadingRecorder
    /// The bus connection the session made last, and the link service on it.
    private(set) var bus: Bus?
    private(set) var service: LinkService?
    private var session: DaemonSession?
    private var task: Task<Int32?, Never>?
    /// Its loop is gone (killed), or its session ended (stopped).
    private(set) var ended = false

    /// Starts the process: opens (and recovers) the readings log through
    /// `disk`, and begins its session on `loop`. Throws when the log cannot
    /// be opened (the daemon exits 73 then).
    init(
        incarnation: Int, loop: EventLoop, config: TetherConfig, disk: DiskModel, busDaemon: InProcessBusDaemon,
        kernel: any ControllerKernel, seed: UInt64, logger: Logger, wallClock: @escaping @Sendable () -> Date, bootClock: BootClock,
        observe: @escaping (SupervisorDecision) -> Void, connected: @escaping (String) -> Void
    ) throws {
        self.incarnation = incarnation
        self.loop = loop
        let log = try ReadingLog(
            directory: config.readings.directory, rotateSize: config.readings.rotateSize,
            retainSize: config.readings.retainSize)
        log.writeCall = { fd, bytes in disk.write(fd, bytes) }
        log.truncateCall = { fd, size in disk.truncate(fd, size) }
        self.log = log
        recorder = ReadingRecorder(
            log: log, flushInterval: config.readings.flushInterval, maxBacklog: config.readings.maxBacklog, loop: loop
        ) { message in
            logger.error("readings log: \(message)", metadata: ["event": "reading-gap"])
        }
        let observer = LoopBox(observe)
        let connectedBox = LoopBox(connected)
        let session = DaemonSession(
            config: config, address: ControlAddress(instance: .default),
            connect: { [unowned self] loop throws(DBusError) in
                let bus = try await Bus.connect(to: busDaemon, on: loop)
                self.bus = bus
                connectedBox.value(await bus.uniqueName)
                return bus
            },
            recorder: recorder, logger: logger, notifier: SystemdNotifier(environment: [:]), loop: loop, io: loop,
            metrics: nil,
            link: LinkEnvironment(rfkill: nil, kernelReasons: false, kernel: kernel, seed: seed, wallClock: wallClock, bootClock: bootClock),
            onLinkService: { [unowned self] service in
                service.decisionObserver = observer.value
                self.service = service
            })
        self.session = session
        task = Task(executorPreference: loop) { await session.serve() }
    }

    /// The unique name of its bus connection, while it has one.
    var uniqueName: String? {
        guard let bus else { return nil }
        return bus.assumeIsolated { $0.isConnected ? $0.uniqueName : nil }
    }

    /// SIGKILL: nothing more of it runs (its loop is dropped), the kernel
    /// closes its descriptors (the log; the bus connection, which the bus
    /// daemon sees hang up).
    func kill(loops: VirtualLoops, busDaemon: InProcessBusDaemon) {
        guard !ended else { return }
        ended = true
        loops.remove(loop)
        if let name = uniqueName { _ = busDaemon.assumeIsolated { $0.disconnect(name) } }
        log.close()
        task = nil
        session = nil
    }

    /// SIGTERM, as `DaemonRunner.run` handles it: the session is cancelled
    /// (the link service drains what reached its socket and leaves the bus),
    /// then the recorder writes and syncs what it holds and closes the log.
    /// Returns the readings that could not be written (the daemon exits 74
    /// with them). Called from a task on another of the simulation's loops,
    /// which the driver keeps running meanwhile.
    func stop(loops: VirtualLoops) async -> Int {
        guard !ended, let task else { return 0 }
        task.cancel()
        _ = await task.value
        ended = true
        recorder.close()
        loops.remove(loop)
        self.task = nil
        session = nil
        return recorder.stats.pending
    }
}

/// A loop-confined value carried through a `@Sendable` callback that runs
/// on the same thread (every virtual loop's driving thread).
final class LoopBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
