import BlueZ
import DBus
import Dispatch
import Foundation
import Logging
import Synchronization
import TetherCore

/// `tether run`: the daemon's life from start to SIGTERM.
public enum DaemonRunner {
    /// Exit codes from sysexits.h, which systemd and scripts understand.
    public enum Exit {
        public static let ok: Int32 = 0
        public static let config: Int32 = 78  // EX_CONFIG
        public static let cannotCreate: Int32 = 73  // EX_CANTCREAT
        public static let unavailable: Int32 = 69  // EX_UNAVAILABLE
        public static let ioError: Int32 = 74  // EX_IOERR
    }

    /// Runs until SIGTERM or SIGINT; returns the exit code.
    /// - Parameter busAddress: the bus to use instead of the system bus (tests, demo).
    public static func run(config: TetherConfig, busAddress: String?, logger: Logger) async -> Int32 {
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
            log: log, flushInterval: config.readings.flushInterval, maxBacklog: config.readings.maxBacklog
        ) { message in
            logger.error("readings log: \(message)", metadata: ["event": "reading-gap"])
        }

        let work = Task {
            await serve(config: config, busAddress: busAddress, recorder: recorder, logger: logger)
        }
        let signal = await TerminationSignal.wait()
        logger.notice("received \(signal), stopping")
        work.cancel()
        await work.value
        recorder.close()
        let stats = recorder.stats
        guard stats.pending == 0 else {
            logger.critical("stopped with \(stats.pending) readings that could not be written: \(stats.lastError ?? "unknown error")")
            return Exit.ioError
        }
        logger.notice("stopped; \(stats.written) readings written, last seq \(stats.lastSeq)")
        return Exit.ok
    }

    /// Connects to the bus and runs the link service, reconnecting to the bus
    /// if it goes away, until cancelled.
    private static func serve(config: TetherConfig, busAddress: String?, recorder: ReadingRecorder, logger: Logger) async {
        var delay: Duration = .milliseconds(500)
        var lastWarning: ContinuousClock.Instant?
        while !Task.isCancelled {
            let bus: Bus
            do {
                if let busAddress {
                    bus = try await Bus.connect(address: busAddress)
                } else {
                    bus = try await Bus.system()
                }
            } catch {
                // Say so at once, then once a minute while it lasts.
                if lastWarning.map({ $0.duration(to: .now) >= .seconds(60) }) ?? true {
                    logger.error("cannot connect to D-Bus: \(error); retrying")
                    lastWarning = .now
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(10))
                continue
            }
            if lastWarning != nil { logger.notice("connected to D-Bus") }
            lastWarning = nil
            delay = .milliseconds(500)
            let service = LinkService(config: config, bus: bus, recorder: recorder, logger: logger, clock: ContinuousClock())
            do {
                try await service.run()
            } catch where !Task.isCancelled {
                logger.error("cannot watch bluetoothd: \(error)")
            } catch {}
            await bus.close()
            if !Task.isCancelled {
                logger.warning("lost the D-Bus connection; reconnecting")
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}

/// Waits for SIGTERM or SIGINT. The signals are ignored and observed
/// through DispatchSources, so they arrive as ordinary events on a queue
/// instead of interrupting whatever thread runs.
public enum TerminationSignal {
    /// The sources live as long as the process: the daemon exits after a signal.
    private final class Kept: @unchecked Sendable {
        let lock = NSLock()
        var sources: [DispatchSourceSignal] = []
    }
    private static let kept = Kept()

    public static func wait() async -> String {
        await withCheckedContinuation { continuation in
            let once = Mutex(false)
            for (number, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    let first = once.withLock { fired in
                        defer { fired = true }
                        return !fired
                    }
                    if first { continuation.resume(returning: name) }
                }
                source.resume()
                kept.lock.withLock { kept.sources.append(source) }
            }
        }
    }
}
