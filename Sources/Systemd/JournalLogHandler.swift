import Dispatch
import Foundation
import Logging

/// A swift-log backend that writes structured entries to journald over its
/// native protocol, so each metadata key is a field `journalctl` can match
/// on and each entry keeps its real priority, instead of the flat text a
/// stderr line becomes in the journal.
public struct JournalLogHandler: LogHandler {
    /// Where journald listens for native-protocol datagrams.
    public static let defaultSocketPath = "/run/systemd/journal/socket"

    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    private let label: String
    private let identifier: String
    private let socketPath: String
    private let fallbackDescriptor: Int32

    /// Entries are sent on their own serial queue, in order: a datagram
    /// socket blocks when journald's queue is full (journald busy or being
    /// restarted), and that must not stall the thread that logs, which may
    /// be the supervisor's. One queue for all handlers keeps entries from
    /// different loggers in the order they were made. Entries wait for room
    /// rather than being dropped: journald runs under its own watchdog, so a
    /// stall ends, and losing the entries around a stall loses the story.
    private static let output = DispatchQueue(label: "tether.journal")

    /// - Parameters:
    ///   - identifier: SYSLOG_IDENTIFIER, what `journalctl -t` selects.
    ///   - socketPath: journald's socket; another path (or `@name`) in tests.
    ///   - fallbackDescriptor: where an entry goes as a plain line when the
    ///     journal cannot take it; stderr unless a test wants to read it.
    public init(
        label: String,
        level: Logger.Level = .info,
        identifier: String = "tether",
        socketPath: String = JournalLogHandler.defaultSocketPath,
        fallbackDescriptor: Int32 = STDERR_FILENO
    ) {
        self.label = label
        self.logLevel = level
        self.identifier = identifier
        self.socketPath = socketPath
        self.fallbackDescriptor = fallbackDescriptor
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = mergedMetadata(for: event)
        let payload = JournalEntry(event: event, label: label, identifier: identifier, metadata: merged).encoded()
        let (socketPath, fallbackDescriptor, identifier) = (socketPath, fallbackDescriptor, identifier)
        Self.output.async {
            // Each entry tries the journal afresh: journald comes back after
            // a restart, and then entries should be structured again. The
            // plain line is only formatted when it is needed.
            if case .failure = JournalTransport.send(payload, to: socketPath) {
                let line = PlainLogLine.text(identifier: identifier, level: event.level, message: event.message, metadata: merged)
                LogOutput.write(Array(line.utf8), to: fallbackDescriptor)
            }
        }
    }

    /// Waits until every entry logged so far is sent (before exiting).
    public static func flush() {
        output.sync {}
    }
}
