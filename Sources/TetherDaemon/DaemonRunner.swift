import BlueZ
import Configuration
import DBus
import EventLoop
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import MetricsTextfile
import Pacing
import Readings
import Rfkill
import Synchronization
import Systemd

/// `tether run`: the daemon's life from start to SIGTERM.
public enum DaemonRunner {
    /// Exit codes from sysexits.h, which systemd and scripts understand.
    public enum Exit {
        public static let ok: Int32 = 0
        /// Another daemon owns this instance's bus name.
        public static let unavailable: Int32 = 69  // EX_UNAVAILABLE
        /// The system refused what the daemon needs to run (a signalfd).
        public static let osError: Int32 = 71  // EX_OSERR
        public static let cannotCreate: Int32 = 73  // EX_CANTCREAT
        public static let ioError: Int32 = 74  // EX_IOERR
        /// The bus policy does not let this user own the name.
        public static let noPermission: Int32 = 77  // EX_NOPERM
        public static let config: Int32 = 78  // EX_CONFIG
    }

    /// Why the daemon stops: a signal, or a failure it cannot wait out.
    private enum Stop: Sendable {
        case signal(String)
        case fatal(Int32)
    }

    /// Runs until SIGTERM or SIGINT; returns the exit code.
    /// - Parameters:
    ///   - busAddress: the bus to use instead of the system bus (tests, demo).
    ///   - notifier: systemd's notify socket (READY=1, STATUS=, WATCHDOG=1, STOPPING=1).
    ///   - watchdog: systemd's watchdog timeout, if it set one; pinged at half of it.
    ///   - rfkill: where rfkill blocks are read (the simulator's, in development).
    ///   - passkey: what `TetherConfig.loadPasskey` read, with `pairing = "passkey-file"`.
    public static func run(
        config: TetherConfig, instance: InstanceName = .default, busAddress: String?, logger: Logger,
        notifier: SystemdNotifier = SystemdNotifier(environment: [:]), watchdog: Duration? = nil,
        rfkill: RfkillSource = RfkillSource(), passkey: Passkey? = nil
    ) async -> Int32 {
        let log: ReadingLog
        do {
            log = try ReadingLog(
                directory: config.readings.directory, rotateSize: config.readings.rotateSize,
                retainSize: config.readings.retainSize
            )
        } catch {
            logger.critical("cannot open the readings directory \(config.readings.directory): \(error)")
            return Exit.cannotCreate
        }
        logger.info("readings log: \(log.recovery)", metadata: ["directory": "\(config.readings.directory)"])
        let recorder = ReadingRecorder(
            log: log, flushInterval: config.readings.flushInterval, maxBacklog: config.readings.maxBacklog,
            onRestored: { path in
                logger.error(
                    "readings log: \(path) was removed while Tether appended to it; its readings were written back to a new file of that name",
                    metadata: ["event": "readings-restored", "file": "\(path)"])
            },
            onStall: { report in
                switch report {
                case .stalled(let message):
                    logger.error("readings log: \(message)", metadata: ["event": "readings-disk-stalled"])
                case .answered(let message):
                    logger.notice("readings log: \(message)", metadata: ["event": "readings-disk-answered"])
                }
            }
        ) { message in
            logger.error("readings log: \(message)", metadata: ["event": "reading-gap"])
        }

        // One loop runs the bus connection, the link service and the
        // control object: every task below prefers it, so none of them hops
        // threads to talk to another.
        let loop = EventLoop(name: "tether")
        loop.moderation = LinkService.loadModeration
        // Work that may block for a while (the metrics file's write and
        // fsync, a controller's reset) runs on a thread of its own, off the
        // loop; not on the global executor's pool, whose first worker starts
        // libdispatch's once-a-second monitor for good.
        let io = EventLoop(name: "tether-io")
        // Metrics, when a textfile is configured: recorded on the loop,
        // written by a task of their own (below).
        let exporter = config.metrics.textfile.map { path in
            let metrics = LinkMetrics(instanceName: "\(instance)")
            return (metrics, MetricsTextfileWriter(path: path, registry: metrics.registry, logger: logger))
        }
        let session = Session(
            config: config, address: ControlAddress(instance: instance), busAddress: busAddress,
            recorder: recorder, logger: logger, notifier: notifier, loop: loop, io: io, metrics: exporter?.0, rfkill: rfkill,
            passkey: passkey
        )
        let code = await withTaskExecutorPreference(loop) {
            await withTaskGroup(of: Stop?.self) { group -> Int32 in
                group.addTask { await session.serve().map { .fatal($0) } }
                group.addTask {
                    do {
                        return try await TerminationSignal.wait(on: loop) {
                            logger.notice("received SIGHUP: ignored; tether run does not reload its configuration (systemctl restart applies a changed one)")
                        }.map { .signal($0) }
                    } catch {
                        logger.critical("\(error)")
                        return .fatal(Exit.osError)
                    }
                }
                if let (metrics, writer) = exporter {
                    group.addTask {
                        // File I/O (write, fsync, rename): off the loop.
                        await withTaskExecutorPreference(io) {
                            await writer.run(every: config.metrics.interval, on: io.clock) {
                                metrics.refresh(readings: recorder.stats)
                                metrics.refresh(unreadDrops: session.unreadDrops)
                            }
                        }
                        return nil
                    }
                }
                if let watchdog {
                    // On the io thread, so that a hung loop is still logged
                    // before the pet is withheld.
                    group.addTask(executorPreference: io) {
                        await session.petWatchdog(timeout: watchdog)
                        return nil
                    }
                }
                var code = Exit.ok
                while let next = await group.next() {
                    guard let reason = next else { continue }
                    switch reason {
                    case .signal(let name):
                        logger.notice("received \(name), stopping")
                    case .fatal(let fatal):
                        code = fatal
                    }
                    break
                }
                _ = notifier.stopping()
                // The link service drains what reached its socket before it leaves the bus.
                group.cancelAll()
                return code
            }
        }
        recorder.close()
        let stats = recorder.stats
        if let (metrics, writer) = exporter {
            // The last word: every reading written, and not online.
            metrics.refresh(readings: stats)
            metrics.stopped()
            writer.write()
        }
        guard stats.pending == 0 else {
            logger.critical("stopped with \(stats.pending) readings that could not be written: \(stats.lastError ?? "unknown error")")
            return Exit.ioError
        }
        logger.notice("stopped; \(stats.written) readings written, last seq \(stats.lastSeq)")
        io.stop()
        loop.stop()
        return code
    }
}

/// One run of the daemon: the bus connection (remade if the bus goes away),
/// the link service on it, the control object and systemd's notifications.
private final class Session: Sendable {
    let config: TetherConfig
    let address: ControlAddress
    let busAddress: String?
    let recorder: ReadingRecorder
    let logger: Logger
    let notifier: SystemdNotifier
    let loop: EventLoop
    let io: EventLoop
    let metrics: LinkMetrics?
    let rfkill: RfkillSource
    let passkey: Passkey?
    /// The link being served right now; nil while (re)connecting to the bus.
    private let current = Mutex<(any ControlledLink)?>(nil)
    /// The bus connection now, and what the ones before it dropped unread.
    private let buses = Mutex<(current: Bus?, closed: (signals: Int, calls: Int))>((nil, (0, 0)))

    /// Messages the daemon's bus connections dropped from their header alone, since start.
    var unreadDrops: (signals: Int, calls: Int) {
        buses.withLock { buses in
            let now = buses.current?.unreadDrops ?? (signals: 0, calls: 0)
            return (buses.closed.signals + now.signals, buses.closed.calls + now.calls)
        }
    }

    private func retire(_ bus: Bus) {
        buses.withLock { buses in
            let drops = bus.unreadDrops
            buses.closed = (buses.closed.signals + drops.signals, buses.closed.calls + drops.calls)
            buses.current = nil
        }
    }

    init(
        config: TetherConfig, address: ControlAddress, busAddress: String?, recorder: ReadingRecorder, logger: Logger,
        notifier: SystemdNotifier, loop: EventLoop, io: EventLoop, metrics: LinkMetrics?, rfkill: RfkillSource,
        passkey: Passkey?
    ) {
        self.passkey = passkey
        self.loop = loop
        self.io = io
        self.rfkill = rfkill
        self.metrics = metrics
        self.config = config
        self.address = address
        self.busAddress = busAddress
        self.recorder = recorder
        self.logger = logger
        self.notifier = notifier
    }

    /// Connects to the bus and runs the link service, reconnecting to the
    /// bus if it goes away, until cancelled. Returns an exit code when the
    /// daemon cannot go on (its name is taken or forbidden).
    func serve() async -> Int32? {
        // The bus's return is tried 500 ms after it went, doubling to 10 s.
        let busBackoff = Backoff(first: .milliseconds(500), cap: .seconds(10))
        var failures = 0
        var lastWarning: ContinuousClock.Instant?
        var ready = false
        while !Task.isCancelled {
            let bus: Bus
            do {
                if let busAddress {
                    bus = try await Bus.connect(address: busAddress, on: loop)
                } else {
                    bus = try await Bus.system(on: loop)
                }
            } catch {
                // Say so at once, then once a minute while it lasts.
                if lastWarning.map({ $0.duration(to: .now) >= .seconds(60) }) ?? true {
                    // A connectFailed says "cannot connect to D-Bus" itself.
                    let what = if case .connectFailed = error { "\(error)" } else { "cannot connect to D-Bus: \(error)" }
                    logger.error("\(what); retrying")
                    lastWarning = .now
                }
                try? await loop.sleep(for: busBackoff.delay(afterFailures: failures))
                failures += 1
                continue
            }
            if lastWarning != nil { logger.notice("connected to D-Bus") }
            lastWarning = nil
            failures = 0

            let service = LinkService(
                config: config, bus: bus, recorder: recorder, logger: logger, metrics: metrics, rfkill: rfkill, blockingWork: io,
                passkey: passkey)
            let control = ControlServer(bus: bus, address: address, link: service)
            do {
                try await control.export()
                try await bus.requestName(address.busName)
            } catch {
                await bus.close()
                if error.name == DBusErrorName.accessDenied {
                    logger.critical(
                        "the D-Bus policy does not let this user own \(address.busName): \(error.message); is io.tether.Tether.conf installed in /usr/share/dbus-1/system.d and the daemon running as user tether?"
                    )
                    return DaemonRunner.Exit.noPermission
                }
                if case .remote(DBusErrorName.failed, _) = error {
                    logger.critical("\(address.busName) is taken: another tether daemon runs for instance '\(address.instance)'")
                    return DaemonRunner.Exit.unavailable
                }
                logger.error("cannot publish the control interface: \(error); reconnecting to D-Bus")
                try? await loop.sleep(for: .seconds(1))
                continue
            }
            if !ready {
                ready = true
                _ = notifier.send([("READY", "1"), ("STATUS", "started; looking for the dongle")])
                logger.notice(
                    "serving \(ControlAddress.interface) as \(address.busName) at \(address.path)",
                    metadata: ["instance": "\(address.instance)"]
                )
            }
            current.withLock { $0 = service }
            buses.withLock { $0.current = bus }
            await withTaskGroup(of: Void.self) { group in
                // Ends when the service does (it finishes `changes`).
                group.addTask { [notifier] in
                    for await change in service.changes {
                        await control.publish(change)
                        _ = notifier.status(change.status.summary())
                    }
                }
                // Control API calls (Reconnect) run as children of this group.
                group.addTask { await bus.serveMethodCalls() }
                do {
                    try await service.run()
                } catch where !Task.isCancelled {
                    logger.error("cannot watch bluetoothd: \(error)")
                } catch {}
                group.cancelAll()
            }
            current.withLock { $0 = nil }
            retire(bus)
            await bus.close()
            if !Task.isCancelled {
                logger.warning("lost the D-Bus connection; reconnecting")
                _ = notifier.status("reconnecting to D-Bus")
                try? await loop.sleep(for: .seconds(1))
            }
        }
        return nil
    }

    func petWatchdog(timeout: Duration) async {
        let watchdog = SupervisorWatchdog(notifier: notifier, logger: logger) { [self] in current.withLock { $0 } }
        // Its sleep is on the io thread's timers, not the loop's: a loop that
        // hangs must still be seen, and said, before the ping is withheld.
        await watchdog.run(timeout: timeout, on: io.clock)
    }
}
