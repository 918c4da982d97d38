import BlueZ
import Configuration
import ControlAPI
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
        let session = DaemonSession(
            config: config, address: ControlAddress(instance: instance), connect: DaemonSession.connector(busAddress: busAddress),
            recorder: recorder, logger: logger, notifier: notifier, loop: loop, io: io, metrics: exporter?.0,
            link: LinkEnvironment(rfkill: rfkill, passkey: passkey)
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
                group.addTask {
                    do throws(ClockSteps.Unavailable) {
                        try await ClockSetWatch.run(on: loop) { step in
                            exporter?.0.clockStepped(bySeconds: Double(step.movedMilliseconds) / 1000)
                            session.clockWasSet()
                            logger.notice("\(step.description)", metadata: [
                                "event": "clock-set", "moved_ms": "\(step.movedMilliseconds)",
                            ])
                        }
                    } catch {
                        logger.warning("\(error)", metadata: ["event": "clock-watch-failed"])
                    }
                    return nil
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
