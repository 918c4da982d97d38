import TOMLKit

/// Typed, located access to the keys of one `[table]` of the config file.
/// Each getter returns nil when the key is absent and throws when it is present
/// but unusable, so callers read as `try section.duration("interval") ?? default`.
struct ConfigSection {
    let name: String
    /// nil when the table is absent from the file: every key then reads as absent.
    let table: TOMLTable?
    let context: ConfigContext

    func key(_ name: String) -> String { "\(self.name).\(name)" }

    func error(_ name: String, _ message: String) -> ConfigError {
        context.error(key(name), message)
    }

    /// Rejects keys this section does not know, reporting the one nearest the top of the file.
    func rejectUnknownKeys(_ known: Set<String>) throws(ConfigError) {
        guard let table else { return }
        let unknown = table.keys.filter { !known.contains($0) }.map { key($0) }
        guard !unknown.isEmpty else { return }
        let first = unknown.min { (context.locator.line(of: $0) ?? .max) < (context.locator.line(of: $1) ?? .max) }
        let found = first ?? unknown[0]
        let valid = known.sorted().joined(separator: ", ")
        throw context.error(found, "unknown key in [\(name)] (known keys: \(valid))")
    }

    private func value(_ name: String) -> (any TOMLValueConvertible)? {
        table?[name]
    }

    private func typeError(_ name: String, expected: String, got value: any TOMLValueConvertible) -> ConfigError {
        error(name, "expected \(expected), got \(ConfigContext.describe(value.type))")
    }

    func string(_ name: String) throws(ConfigError) -> String? {
        guard let value = value(name) else { return nil }
        guard let string = value.string else { throw typeError(name, expected: "a string", got: value) }
        return string
    }

    func bool(_ name: String) throws(ConfigError) -> Bool? {
        guard let value = value(name) else { return nil }
        guard let bool = value.bool else { throw typeError(name, expected: "true or false", got: value) }
        return bool
    }

    func int(_ name: String) throws(ConfigError) -> Int? {
        guard let value = value(name) else { return nil }
        guard let int = value.int else { throw typeError(name, expected: "an integer", got: value) }
        return int
    }

    /// Accepts integers too: `jitter = 0` is a reasonable thing to write.
    func double(_ name: String) throws(ConfigError) -> Double? {
        guard let value = value(name) else { return nil }
        if let double = value.double { return double }
        if let int = value.int { return Double(int) }
        throw typeError(name, expected: "a number", got: value)
    }

    /// A non-negative duration string such as "5s".
    func duration(_ name: String) throws(ConfigError) -> Duration? {
        let example = "a duration such as \"250ms\", \"5s\" or \"3m\""
        guard let value = value(name) else { return nil }
        guard let text = value.string else { throw typeError(name, expected: example + " (a string)", got: value) }
        guard let duration = DurationText.parse(text) else {
            throw error(name, "expected \(example), got \(ConfigContext.quoted(text))")
        }
        guard duration >= .zero else { throw error(name, "must not be negative, got \(ConfigContext.quoted(text))") }
        return duration
    }

    /// A byte size: a string such as "64MiB", or a plain integer number of bytes.
    func byteSize(_ name: String) throws(ConfigError) -> Int64? {
        let example = "a size such as \"512KiB\", \"64MiB\" or \"1GiB\""
        guard let value = value(name) else { return nil }
        if let int = value.int {
            guard int >= 0 else { throw error(name, "must not be negative, got \(int)") }
            return Int64(int)
        }
        guard let text = value.string else { throw typeError(name, expected: example, got: value) }
        guard let size = ByteSizeText.parse(text) else {
            throw error(name, "expected \(example), got \(ConfigContext.quoted(text))")
        }
        return size
    }

    func stringArray(_ name: String) throws(ConfigError) -> [String]? {
        guard let value = value(name) else { return nil }
        guard let array = value.array else { throw typeError(name, expected: "an array of strings", got: value) }
        var strings: [String] = []
        for (index, element) in array.enumerated() {
            guard let string = element.string else {
                throw error(name, "expected an array of strings, element \(index + 1) is \(ConfigContext.describe(element.type))")
            }
            strings.append(string)
        }
        return strings
    }

    /// A UUID in any accepted spelling, normalised.
    func uuid(_ name: String) throws(ConfigError) -> String? {
        guard let text = try string(name) else { return nil }
        return try normalizedUUID(text, key: name)
    }

    func normalizedUUID(_ text: String, key name: String) throws(ConfigError) -> String {
        guard let uuid = ConfigUUID.normalize(text) else {
            throw error(name, "expected a UUID such as \"2a19\" or \"\(ConfigUUID.nusService)\", got \(ConfigContext.quoted(text))")
        }
        return uuid
    }
}
