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
        if let key { text += "\(key): " }
        return text + message
    }
}
