/// The TOML 1.0 grammar for unquoted values: booleans, integers, floats, dates and
/// times. The prescreen only lets well-formed ones through, because toml++ classifies
/// a bare value by loose character traits and then asserts that the text has the
/// shape it guessed (`1979-05-27Tx07:32:00` aborts in `parse_time`).
enum TOMLBareValue {
    /// Longer unquoted values cannot be meaningful in a config file, and toml++ reads
    /// a bare value into a fixed-size history buffer.
    static let maximumLength = 64

    static func isValid(_ token: [UInt8]) -> Bool {
        guard !token.isEmpty, token.count <= maximumLength else { return false }
        if token == Array("true".utf8) || token == Array("false".utf8) { return true }
        return matches(token, isDateOrTime) || matches(token, isSpecialFloat) || matches(token, isNumber)
    }

    private typealias Matcher = (_ token: [UInt8], _ index: inout Int) -> Bool

    /// Whether `matcher` consumes the whole token.
    private static func matches(_ token: [UInt8], _ matcher: Matcher) -> Bool {
        var index = 0
        return matcher(token, &index) && index == token.count
    }

    private static func byte(_ token: [UInt8], _ index: Int) -> UInt8? {
        index < token.count ? token[index] : nil
    }

    private static func accept(_ token: [UInt8], _ index: inout Int, _ characters: String) -> Bool {
        guard let next = byte(token, index), characters.utf8.contains(next) else { return false }
        index += 1
        return true
    }

    private static func isDecimal(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    /// `digit *( digit / "_" digit )`
    private static func digits(_ token: [UInt8], _ index: inout Int, _ isDigit: (UInt8) -> Bool) -> Bool {
        guard let first = byte(token, index), isDigit(first) else { return false }
        index += 1
        while let next = byte(token, index) {
            if isDigit(next) {
                index += 1
            } else if next == UInt8(ascii: "_"), let after = byte(token, index + 1), isDigit(after) {
                index += 2
            } else {
                break
            }
        }
        return true
    }

    /// Exactly `count` decimal digits.
    private static func fixedDigits(_ token: [UInt8], _ index: inout Int, _ count: Int) -> Bool {
        for _ in 0..<count {
            guard let next = byte(token, index), isDecimal(next) else { return false }
            index += 1
        }
        return true
    }

    private static func isSpecialFloat(_ token: [UInt8], _ index: inout Int) -> Bool {
        _ = accept(token, &index, "+-")
        let rest = Array(token[index...])
        guard rest == Array("inf".utf8) || rest == Array("nan".utf8) else { return false }
        index = token.count
        return true
    }

    /// Integers (decimal, or unsigned hex/octal/binary) and floats.
    private static func isNumber(_ token: [UInt8], _ index: inout Int) -> Bool {
        if byte(token, 0) == UInt8(ascii: "0"), let prefix = byte(token, 1) {
            index = 2
            switch prefix {
            case UInt8(ascii: "x"): return digits(token, &index) { isDecimal($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0 | 0x20) }
            case UInt8(ascii: "o"): return digits(token, &index) { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "7") }
            case UInt8(ascii: "b"): return digits(token, &index) { $0 == UInt8(ascii: "0") || $0 == UInt8(ascii: "1") }
            default: index = 0
            }
        }
        _ = accept(token, &index, "+-")
        // No leading zeros: "0", or a non-zero digit followed by digits.
        if byte(token, index) == UInt8(ascii: "0") {
            index += 1
        } else if !digits(token, &index, isDecimal) {
            return false
        }
        if accept(token, &index, ".") {
            guard digits(token, &index, isDecimal) else { return false }
        }
        if accept(token, &index, "eE") {
            _ = accept(token, &index, "+-")
            guard digits(token, &index, isDecimal) else { return false }
        }
        return true
    }

    /// Local date, local time, local date-time and offset date-time.
    private static func isDateOrTime(_ token: [UInt8], _ index: inout Int) -> Bool {
        if byte(token, 2) == UInt8(ascii: ":") { return isTime(token, &index) }
        guard fixedDigits(token, &index, 4), accept(token, &index, "-"), fixedDigits(token, &index, 2),
              accept(token, &index, "-"), fixedDigits(token, &index, 2)
        else { return false }
        guard index < token.count else { return true }
        guard accept(token, &index, "Tt "), isTime(token, &index) else { return false }
        guard index < token.count else { return true }
        if accept(token, &index, "Zz") { return true }
        return accept(token, &index, "+-") && fixedDigits(token, &index, 2) && accept(token, &index, ":") && fixedDigits(token, &index, 2)
    }

    /// `HH:MM:SS[.fraction]`
    private static func isTime(_ token: [UInt8], _ index: inout Int) -> Bool {
        guard fixedDigits(token, &index, 2), accept(token, &index, ":"), fixedDigits(token, &index, 2),
              accept(token, &index, ":"), fixedDigits(token, &index, 2)
        else { return false }
        if accept(token, &index, ".") {
            var count = 0
            while let next = byte(token, index), isDecimal(next) {
                index += 1
                count += 1
            }
            return count > 0
        }
        return true
    }
}
