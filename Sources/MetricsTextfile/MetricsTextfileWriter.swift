import DurableFile
import Logging
import Synchronization

/// Writes a registry's metrics, in Prometheus's text format, to a file that
/// node_exporter's textfile collector reads (`--collector.textfile.directory`).
///
/// Invariants: node_exporter reads the previous file or the new one, whole,
/// never a torn mix: each write goes to `PATH.tmp` (which the collector,
/// reading `*.prom` only, ignores), is fsynced, and is renamed over `PATH`
/// (which is created 0644 whatever the umask: node_exporter's user reads it).
/// A failure is logged once, with what to check, and again only after a
/// write succeeded in between: a full disk or a missing `ReadWritePaths=`
/// does not fill the journal every interval.
///
/// Threading: `run` and `write` are called from one task at a time (the
/// daemon's exporter task, then its stop); they do blocking file I/O, so that
/// task must not run on the daemon's event loop.
public final class MetricsTextfileWriter: Sendable {
    public let path: String
    private let registry: MetricsRegistry
    private let logger: Logger
    private let failing = Mutex(false)

    public init(path: String, registry: MetricsRegistry, logger: Logger) {
        self.path = path
        self.registry = registry
        self.logger = logger
    }

    /// Writes the file now; returns its size in bytes, or nil after a
    /// failure (logged).
    @discardableResult
    public func write() -> Int? {
        let bytes = registry.exposition()
        do throws(SmallFile.Failure) {
            // Write, fsync, rename: node_exporter sees the old file or the
            // new one. The directory is not fsynced: after a power loss the
            // next interval writes the file again anyway.
            try SmallFile.replace(path, with: bytes, durable: true, syncDirectory: false, mode: 0o644)
            if failing.withLock({ failing in defer { failing = false }; return failing }) {
                logger.notice("metrics: writing \(path) works again")
            }
            return bytes.count
        } catch {
            if !failing.withLock({ failing in defer { failing = true }; return failing }) {
                logger.error(
                    "metrics: cannot write \(path): \(error). Is its directory there, writable by this user, and in the unit's ReadWritePaths= (see /usr/share/doc/tether/examples/metrics-textfile.conf)? Retrying every interval; logged again once it works.",
                    metadata: ["event": "metrics-write-failed"]
                )
            }
            return nil
        }
    }

    /// Every `interval` on `clock`, calls `refresh` (which brings values
    /// that are read rather than recorded up to date) and writes the file,
    /// until the task is cancelled. The first write is at once.
    public func run<C: Clock>(
        every interval: Duration, on clock: C, refresh: @Sendable () -> Void
    ) async where C.Duration == Duration {
        while !Task.isCancelled {
            refresh()
            write()
            do {
                try await clock.sleep(for: interval)
            } catch {
                return
            }
        }
    }
}
