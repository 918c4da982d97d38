/// A problem with the configuration file, located as precisely as we can so the
/// message can be acted on without reading the source:
/// `/etc/tether/tether.toml:7: keepalive.interval: expected a duration such as "250ms", "5s" or "3m", got "5 parsecs"`.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file the configuration came from (or the name given to `parse`).
    public var file: String
    /// 1-based line of the offending key or syntax error; nil when it cannot be located.
    public var line: Int?
    /// Dotted key ("keepalive.interval") or table name ("dongle"); nil for file-level problems.
    public var key: String?
    /// What is wrong, phrased for the person editing the file.
    public var message: String

    public init(file: String, line: Int? = nil, key: String? = nil, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        text += ": "
        if let key { text += "\(Self.displayed(key)): " }
        // Messages quote the user's text, but some come from toml++ or the
        // prescreen with the offending bytes as they were.
        for scalar in message.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7f {
                text += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                text.unicodeScalars.append(scalar)
            }
        }
        return text
    }

    /// A key as the person editing the file would recognise it: dotted bare keys
    /// as they are, any other key (TOML allows `"" = 1` and `"a\nb" = 1`) quoted
    /// and escaped, so that the message stays one line and shows where the key ends.
    static func displayed(_ key: String) -> String {
        let isBare = key.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { segment in
            !segment.isEmpty && segment.utf8.allSatisfy(TOMLBareKey.allows)
        }
        return isBare ? key : ConfigContext.quoted(key)
    }
}
