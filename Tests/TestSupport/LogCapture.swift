import Foundation
import Logging

/// Collects a logger's lines for assertions and failure messages.
public final class LogCapture: @unchecked Sendable {
    // @unchecked: `lines` is guarded by `lock`.
    private let lock = NSLock()
    private var lines: [String] = []
    public init() {}
    public func append(_ line: String) { lock.withLock { lines.append(line) } }
    public var all: [String] { lock.withLock { lines } }
}

/// A swift-log handler that appends "LEVEL MESSAGE key=value…" to a `LogCapture`.
public struct CapturingLogHandler: LogHandler {
    public var logLevel: Logger.Level = .debug
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    let capture: LogCapture

    public init(capture: LogCapture) {
        self.capture = capture
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let extra = (event.metadata ?? [:]).map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " ")
        capture.append("\(event.level) \(event.message) \(extra)")
    }
}
