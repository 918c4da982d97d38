/// A field name journald will store. journald silently drops fields whose
/// names break its rules (only A–Z, 0–9 and `_`, starting with a letter
/// since a leading `_` is reserved for fields journald itself vouches for,
/// at most 64 bytes), so names are checked when made, not discovered
/// missing in `journalctl` later.
public struct JournalFieldName: Sendable, Hashable, CustomStringConvertible {
    public static let maximumLength = 64

    public static let message = JournalFieldName(trusted: "MESSAGE")
    public static let priority = JournalFieldName(trusted: "PRIORITY")
    public static let syslogIdentifier = JournalFieldName(trusted: "SYSLOG_IDENTIFIER")
    public static let codeFile = JournalFieldName(trusted: "CODE_FILE")
    public static let codeLine = JournalFieldName(trusted: "CODE_LINE")
    public static let codeFunction = JournalFieldName(trusted: "CODE_FUNC")
    /// The swift-log label of the logger that made the entry.
    public static let logger = JournalFieldName(trusted: "TETHER_LOGGER")

    /// The prefix of every field this project defines, so that
    /// `journalctl -o verbose` shows which fields are ours and a metadata
    /// key can never collide with one of systemd's (`MESSAGE`, `PRIORITY`).
    public static let projectPrefix = "TETHER_"

    public let rawValue: String

    /// Nil when journald would reject `rawValue`.
    public init?(validating rawValue: String) {
        guard Self.isValid(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    /// The field for a swift-log metadata key: `device-id` becomes
    /// `TETHER_DEVICE_ID`. Any key maps to some valid name; keys differing
    /// only in case or punctuation share a field, which the journal allows
    /// (a field may hold several values in one entry).
    public init(metadataKey key: String) {
        var name = Self.projectPrefix
        for scalar in key.unicodeScalars {
            guard name.utf8.count < Self.maximumLength else { break }
            switch scalar {
            case "A"..."Z", "0"..."9", "_": name.unicodeScalars.append(scalar)
            case "a"..."z": name.unicodeScalars.append(Unicode.Scalar(scalar.value - 32) ?? "_")
            default: name.unicodeScalars.append("_")
            }
        }
        rawValue = name
    }

    private init(trusted rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= maximumLength,
              (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first)
        else { return false }
        return bytes.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_")
        }
    }
}
