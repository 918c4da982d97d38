import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
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
    private let output: BoundedLogQueue<Outgoing>

    /// Entries are sent by one writer thread, in order: a datagram socket
    /// blocks when journald's queue is full (journald busy or being
    /// restarted), and that must not stall the thread that logs, which may
    /// be the supervisor's. One queue for all handlers keeps entries from
    /// different loggers in the order they were made. It holds at most
    /// `queueLimit` bytes: journald runs under its own watchdog, so a stall
    /// ends, but until then memory must not grow with it; what does not fit
    /// is dropped, counted, and reported in one entry once journald takes
    /// entries again.
    public static let queueLimit = 1 << 20

    static let output = makeOutput(limit: queueLimit)

    /// The writer with its bound (tests make their own, to stall it alone).
    static func makeOutput(limit: Int) -> BoundedLogQueue<Outgoing> {
        BoundedLogQueue<Outgoing>(
            label: "tether-journal", limit: limit,
            deliver: { $0.send() },
            notice: { dropped, before in before.dropNotice(dropped) }
        )
    }

    /// One entry on its way: the payload, and where and how it goes when
    /// the journal refuses it.
    struct Outgoing: Sendable {
        var payload: [UInt8]
        var socketPath: String
        var fallbackDescriptor: Int32
        var identifier: String
        var level: Logger.Level
        var message: Logger.Message
        var metadata: Logger.Metadata

        func send() {
            // Each entry tries the journal afresh: journald comes back after
            // a restart, and then entries should be structured again. The
            // plain line is only formatted when it is needed.
            if case .failure = JournalTransport.send(payload, to: socketPath) {
                let line = PlainLogLine.text(identifier: identifier, level: level, message: message, metadata: metadata)
                LogOutput.write(Array(line.utf8), to: fallbackDescriptor)
            }
        }

        /// The warning that `dropped` entries after this one were lost, to
        /// the same journal.
        func dropNotice(_ dropped: Int) -> Outgoing {
            let message: Logger.Message = "\(dropped) log entries dropped: journald did not take them in time (the queue holds \(JournalLogHandler.queueLimit >> 10) KiB)"
            let metadata: Logger.Metadata = ["event": "log-dropped", "dropped": "\(dropped)"]
            var entry = JournalEntry()
            entry.append(.message, message.description)
            entry.append(.priority, String(Logger.Level.warning.syslogPriority))
            entry.append(.syslogIdentifier, identifier)
            for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
                entry.append(JournalFieldName(metadataKey: key), value.description)
            }
            return Outgoing(
                payload: entry.encoded(), socketPath: socketPath, fallbackDescriptor: fallbackDescriptor,
                identifier: identifier, level: .warning, message: message, metadata: metadata)
        }
    }

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
        self.init(label: label, level: level, identifier: identifier, socketPath: socketPath, fallbackDescriptor: fallbackDescriptor, output: Self.output)
    }

    init(label: String, level: Logger.Level, identifier: String, socketPath: String, fallbackDescriptor: Int32, output: BoundedLogQueue<Outgoing>) {
        self.output = output
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
        let outgoing = Outgoing(
            payload: payload, socketPath: socketPath, fallbackDescriptor: fallbackDescriptor, identifier: identifier,
            level: event.level, message: event.message, metadata: merged)
        output.submit(outgoing, size: payload.count)
    }

    /// Waits until every entry logged so far is sent (before exiting).
    public static func flush() {
        Self.output.flush()
    }

    /// Entries dropped since start because journald did not take them.
    public static var droppedEntries: Int { Self.output.dropped }
}
