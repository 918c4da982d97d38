import Logging

extension JournalEntry {
    /// The entry for a swift-log event. `metadata` is all that applies to
    /// the event, already merged by the handler (its own, the provider's
    /// and the event's); `event.metadata` is not read again.
    ///
    /// Besides MESSAGE and PRIORITY, the entry carries SYSLOG_IDENTIFIER
    /// (what `journalctl -t` selects on), the source location journald
    /// knows as CODE_*, the logger's label, and each metadata key as its
    /// own `TETHER_` field, so `journalctl TETHER_DEVICE=…` finds one
    /// device's history without grepping message text.
    public init(event: LogEvent, label: String, identifier: String, metadata: Logger.Metadata) {
        self.init()
        append(.message, event.message.description)
        append(.priority, String(event.level.syslogPriority))
        append(.syslogIdentifier, identifier)
        append(.codeFile, event.file)
        append(.codeLine, String(event.line))
        append(.codeFunction, event.function)
        append(.logger, label)
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            append(JournalFieldName(metadataKey: key), value.description)
        }
        // An error passed beside the message (logger.error("…", error: e))
        // is kept unless metadata already says what the error was.
        if let error = event.error, metadata["error"] == nil {
            append(JournalFieldName(metadataKey: "error"), String(describing: error))
        }
    }
}
