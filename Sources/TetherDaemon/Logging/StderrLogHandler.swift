import Foundation
import Logging
import Synchronization

/// Plain log lines on stderr: time, level, message, then `key=value` metadata.
/// Used when the daemon is not under journald (a terminal, the demo, tests).
public struct StderrLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    /// Whole lines go out in one write(2), so lines from several threads never interleave.
    private static let lock = Mutex(())

    public init(label: String, level: Logger.Level = .info) {
        self.label = label
        logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        var line = "\(Self.timestamp()) \(event.level.rawValue.uppercased().padding(toLength: 8, withPad: " ", startingAt: 0))\(event.message)"
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            line += " \(key)=\(value)"
        }
        line += "\n"
        Self.lock.withLock { _ in
            line.utf8CString.withUnsafeBufferPointer { buffer in
                var offset = 0
                let count = buffer.count - 1  // without the NUL
                while offset < count {
                    let written = buffer.baseAddress.map { write(2, $0 + offset, count - offset) } ?? -1
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        return String(
            format: "%02d:%02d:%02d.%03d", parts.tm_hour, parts.tm_min, parts.tm_sec, Int(now.tv_nsec / 1_000_000)
        )
    }
}
