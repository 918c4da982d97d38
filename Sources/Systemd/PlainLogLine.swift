import Logging

/// The line written to stderr when an entry cannot reach the journal.
/// Under systemd, stderr usually ends up in the journal anyway (as plain
/// text, without the structured fields), so the message survives a journald
/// restart; outside systemd it is at least on the terminal.
enum PlainLogLine {
    static func text(
        identifier: String, level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata
    ) -> String {
        var line = "\(identifier): \(level.rawValue.uppercased()) \(message)"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line += " \(key)=\(value)"
        }
        return line + "\n"
    }
}
