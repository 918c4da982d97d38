import TOMLKit

/// What every typed read needs to produce a located `ConfigError`.
struct ConfigContext {
    let file: String
    let locator: KeyLocator

    func error(_ key: String?, _ message: String) -> ConfigError {
        ConfigError(file: file, line: key.flatMap { locator.line(of: $0) }, key: key, message: message)
    }

    /// Quotes a user-supplied string for a message, escaping quotes and control
    /// characters, shortened so a fuzzed or pasted-in megabyte value does not swamp
    /// the log line. (Not `debugDescription`: TOMLKit redefines it for String.)
    static func quoted(_ text: String) -> String {
        let limit = 60
        var result = "\""
        for character in text.unicodeScalars.prefix(limit) {
            switch character {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case _ where character.value < 0x20 || character.value == 0x7f:
                result += "\\u{\(String(character.value, radix: 16))}"
            default: result.unicodeScalars.append(character)
            }
        }
        return result + (text.unicodeScalars.count > limit ? "…\"" : "\"")
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
