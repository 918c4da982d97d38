import Logging

/// The line written to stderr when an entry cannot reach the journal.
/// Under systemd, stderr usually ends up in the journal anyway (as plain
/// text, without the structured fields), so the message survives a journald
/// restart; outside systemd it is at least on the terminal.
///
/// A plain line is one line whatever the message holds: text from a peer (a
/// D-Bus error's message, libdbus's own ends in a newline; a broker's reason)
/// could otherwise split an entry in two, or forge one, for whoever reads the
/// lines (`journalctl` of stderr, a grep, a log shipper).
public enum PlainLogLine {
    static func text(
        identifier: String, level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata
    ) -> String {
        var line = "\(identifier): \(level.rawValue.uppercased()) \(escaped(message.description))"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line += " \(escaped(key))=\(escaped(value.description))"
        }
        return line + "\n"
    }

    /// `text` on one line: white space at its end dropped, and every other
    /// control character written as an escape (`\n`, `\r`, `\t`, `\u{1b}`).
    public static func escaped(_ text: String) -> String {
        let scalars = text.unicodeScalars
        var end = scalars.endIndex
        while end > scalars.startIndex, isSpace(scalars[scalars.index(before: end)]) {
            end = scalars.index(before: end)
        }
        guard scalars[..<end].contains(where: isControl) else {
            return end == scalars.endIndex ? text : String(scalars[..<end])
        }
        var result = String.UnicodeScalarView()
        for scalar in scalars[..<end] {
            guard isControl(scalar) else {
                result.append(scalar)
                continue
            }
            let escape: String = switch scalar {
            case "\n": "\\n"
            case "\r": "\\r"
            case "\t": "\\t"
            default: "\\u{\(String(scalar.value, radix: 16))}"
            }
            result.append(contentsOf: escape.unicodeScalars)
        }
        return String(result)
    }

    /// C0 controls, DEL and C1 controls (NEL among them).
    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    private static func isSpace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == " " || (0x09...0x0D).contains(scalar.value)
    }
}
