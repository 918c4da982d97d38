import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import Systemd
import TextColumns

/// Plain log lines on stderr: time, level, message, then `key=value` metadata.
/// Used when the daemon is not under journald (a terminal, the demo, tests).
public struct StderrLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    /// Lines are written by one writer thread, in order, one write(2) each:
    /// a slow reader of stderr (journald under load) must not stall the
    /// thread that logs, which may be the supervisor's. At most 1 MiB
    /// waits; beyond it lines are dropped, counted, and reported in one
    /// line once the reader takes lines again.
    private static let output = BoundedLogQueue<[UInt8]>(
        label: "tether-log", limit: 1 << 20,
        deliver: { LogOutput.write($0, to: 2) },
        notice: { dropped, _ in
            Array("\(timestamp()) WARNING \(dropped) log lines dropped: stderr's reader did not take them in time event=log-dropped\n".utf8)
        }
    )

    public init(label: String, level: Logger.Level = .info) {
        self.label = label
        logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = mergedMetadata(for: event)
        // One line whatever the message or a value holds (PlainLogLine.escaped).
        var line = "\(Self.timestamp()) \(event.level.rawValue.uppercased().padded(to: 9))\(PlainLogLine.escaped(event.message.description))"
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            line += " \(PlainLogLine.escaped(key))=\(PlainLogLine.escaped(value.description))"
        }
        line += "\n"
        let bytes = Array(line.utf8)
        Self.output.submit(bytes, size: bytes.count)
    }

    /// Waits until every line logged so far is written (before exiting).
    public static func flush() {
        output.flush()
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        // By hand: String(format:) would bring in CoreFoundation's formatter.
        func padded(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return padded(Int(parts.tm_hour), 2) + ":" + padded(Int(parts.tm_min), 2) + ":" + padded(Int(parts.tm_sec), 2)
            + "." + padded(Int(now.tv_nsec / 1_000_000), 3)
    }
}
