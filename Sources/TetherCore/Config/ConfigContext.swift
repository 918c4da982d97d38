import TOMLKit

/// What every typed read needs to produce a located `ConfigError`.
struct ConfigContext {
    let file: String
    let locator: KeyLocator

    func error(_ key: String?, _ message: String) -> ConfigError {
        ConfigError(file: file, line: key.flatMap { locator.line(of: $0) }, key: key, message: message)
    }

    /// Quotes a user-supplied string for a message, shortened so a fuzzed or
    /// pasted-in megabyte value does not swamp the log line.
    static func quoted(_ text: String) -> String {
        let limit = 60
        let shown = text.count > limit ? String(text.prefix(limit)) + "…" : text
        return shown.debugDescription
    }

    /// "an integer", "a string", … for "expected …, got …" messages.
    static func describe(_ type: TOMLType) -> String {
        switch type {
        case .table: return "a table"
        case .array: return "an array"
        case .string: return "a string"
        case .int: return "an integer"
        case .double: return "a floating-point number"
        case .bool: return "a boolean"
        case .date: return "a date"
        case .time: return "a time"
        case .dateTime: return "a date-time"
        }
    }
}
