/// Rejects inputs that trip known bugs in the toml++ parser behind TOMLKit before
/// they reach it. toml++ 3.4.0 asserts (aborting the process) or reaches
/// `__builtin_unreachable` (undefined behaviour) on some malformed documents, and the
/// config parser must never crash whatever the input. Every input refused here is
/// invalid TOML anyway (bar unquoted values over 64 characters, which no setting
/// takes), so valid files are unaffected:
///
/// - a non-ASCII character outside strings and comments (`x = é`): toml++'s
///   whitespace test is unreachable for most of U+00A1–U+0499 and U+2D6E–U+3167;
/// - a table header whose name starts with something other than a key character or
///   quote (`[.a]`, `[ ,a]`): an assertion in `parse_key`;
/// - `}` where an array element should start (`x = [}`): an assertion in `parse_value`;
/// - a date, a space and a single digit (`x = 1979-05-27 1`): an assertion while
///   scanning for a date-time with a space instead of "T";
/// - an unquoted value that is not a well-formed boolean, number, date or time
///   (`1979-05-27Tx07:32:00`): toml++ guesses the type from loose character traits
///   and then asserts the guess (see `TOMLBareValue`);
/// - in a multi-line basic string, a non-ASCII character right after a backslash, or
///   after the whitespace following a line-ending backslash (the same whitespace test).
///
/// The scan follows just enough TOML (strings, comments, bare values, bracket nesting,
/// line starts) to tell where those can occur. Where it could disagree with toml++ it
/// errs towards "not in a string", i.e. towards checking more. Found, and checked, by
/// fuzzing toml++ with libFuzzer.
enum TOMLPrescreen {
    struct Problem: Equatable {
        var line: Int
        var message: String
    }

    private enum Mode {
        case normal, comment, basic, literal, multilineBasic, multilineLiteral
        /// An unquoted value (number, date, boolean, or garbage): toml++ reads it up
        /// to the next value terminator, whatever it contains.
        case bareValue
    }

    private static let quote = UInt8(ascii: "\""), apostrophe = UInt8(ascii: "'"), newline = UInt8(ascii: "\n")

    static func check(_ text: String) -> Problem? {
        let bytes = Array(text.utf8)
        var mode = Mode.normal
        var line = 1
        var nesting: [UInt8] = []  // open "[" and "{" of values
        var atStatementStart = true  // top level, only blanks so far on this line
        var inHeader = false  // header brackets are not value nesting
        var expectingValue = false  // after "=", or where an array element may start
        // In key position toml++ starts a quoted key only after a separator; a quote
        // after a key character is an error there, so it is not a string for us either.
        var quoteStartsKey = true
        var bareValue: [UInt8] = []  // the unquoted value being read
        var index = 0

        func run(of byte: UInt8, at start: Int) -> Int {
            var end = start
            while end < bytes.count, bytes[end] == byte { end += 1 }
            return end - start
        }

        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == newline, mode != .multilineBasic, mode != .multilineLiteral {
                // Comments, bare values and single-line strings end here (an unterminated
                // string is a toml++ error, so parsing stops before anything we could miss).
                if mode == .bareValue, !TOMLBareValue.isValid(bareValue) { return invalidValue(bareValue, line) }
                line += 1
                mode = .normal
                quoteStartsKey = true
                if nesting.isEmpty {
                    atStatementStart = true
                    inHeader = false
                    expectingValue = false
                }
                continue
            }
            switch mode {
            case .comment:
                continue
            case .multilineBasic, .multilineLiteral:
                if byte == newline { line += 1 }
                let delimiter = mode == .multilineBasic ? quote : apostrophe
                if byte == UInt8(ascii: "\\"), mode == .multilineBasic {
                    // toml++ puts what follows a backslash through its whitespace test, and a
                    // line-ending backslash skips all whitespace after it the same way.
                    guard index < bytes.count else { continue }
                    if isBlank(bytes[index]) {
                        while index < bytes.count, isBlank(bytes[index]) {
                            if bytes[index] == newline { line += 1 }
                            index += 1
                        }
                        if index < bytes.count, bytes[index] >= 0x80 { return nonASCII(line) }
                    } else if bytes[index] >= 0x80 {
                        return nonASCII(line)
                    } else {
                        index += 1  // the escaped character, e.g. the quote in \"
                    }
                } else if byte == delimiter {
                    let count = run(of: delimiter, at: index - 1)
                    // A closing delimiter may carry up to two quotes of content before it.
                    if count >= 3 { mode = .normal }
                    index += min(count, 5) - 1
                }
                continue
            case .basic:
                if byte == UInt8(ascii: "\\") {
                    if index < bytes.count, bytes[index] != newline { index += 1 }
                } else if byte == quote {
                    mode = .normal
                }
                continue
            case .literal:
                if byte == apostrophe { mode = .normal }
                continue
            case .bareValue:
                if !isValueTerminator(byte) {
                    if byte >= 0x80 { return nonASCII(line) }
                    bareValue.append(byte)
                    if bareValue.count > TOMLBareValue.maximumLength { return invalidValue(bareValue, line) }
                    continue
                }
                // toml++ reads on past a space after something shaped like a date
                // ("1979-05-27 07:32:00"), and asserts if the digit after the space
                // is directly followed by a terminator.
                if byte == UInt8(ascii: " "), isDateShaped(bareValue), index < bytes.count, isDigit(bytes[index]) {
                    if index + 1 < bytes.count, isValueTerminator(bytes[index + 1]) {
                        return Problem(line: line, message: "a date must be followed by a time such as 07:32:00")
                    }
                    bareValue.append(byte)
                    continue
                }
                guard TOMLBareValue.isValid(bareValue) else { return invalidValue(bareValue, line) }
                mode = .normal  // and handle the terminator below
            case .normal:
                break
            }

            if byte >= 0x80 { return nonASCII(line) }
            if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r") {
                quoteStartsKey = true
                continue
            }
            if byte == UInt8(ascii: "#") {
                mode = .comment
                continue
            }

            if expectingValue {
                expectingValue = false
                switch byte {
                case quote, apostrophe:
                    mode = openString(byte, at: index - 1, advancing: &index, run: run)
                case UInt8(ascii: "["):
                    nesting.append(byte)
                    expectingValue = true
                case UInt8(ascii: "{"):
                    nesting.append(byte)
                    quoteStartsKey = true
                case UInt8(ascii: "}") where nesting.last == UInt8(ascii: "["):
                    return Problem(line: line, message: "unexpected '}' in an array")
                case UInt8(ascii: "]"), UInt8(ascii: "}"):
                    _ = nesting.popLast()
                case UInt8(ascii: ","):
                    expectingValue = nesting.last == UInt8(ascii: "[")
                default:
                    mode = .bareValue
                    bareValue = [byte]
                }
                continue
            }

            if atStatementStart {
                atStatementStart = false
                if byte == UInt8(ascii: "[") {
                    inHeader = true
                    quoteStartsKey = true
                    var next = index
                    if next < bytes.count, bytes[next] == UInt8(ascii: "[") { next += 1 }
                    while next < bytes.count, bytes[next] == UInt8(ascii: " ") || bytes[next] == UInt8(ascii: "\t") { next += 1 }
                    if next < bytes.count, !isKeyStart(bytes[next]) {
                        return Problem(line: line, message: "a table name must start with a letter, digit, '_', '-' or a quote")
                    }
                    continue
                }
            }

            let startsKey = quoteStartsKey
            quoteStartsKey = byte == UInt8(ascii: ".") || byte == UInt8(ascii: "{") || byte == UInt8(ascii: ",")
                || (inHeader && byte == UInt8(ascii: "["))
            switch byte {
            case quote where startsKey, apostrophe where startsKey:
                mode = openString(byte, at: index - 1, advancing: &index, run: run)
            case UInt8(ascii: "=") where !inHeader:
                expectingValue = true
            case UInt8(ascii: "[") where !inHeader:
                nesting.append(byte)
                expectingValue = true
            case UInt8(ascii: "{") where !inHeader:
                nesting.append(byte)
            case UInt8(ascii: "]") where !inHeader, UInt8(ascii: "}") where !inHeader:
                _ = nesting.popLast()
            case UInt8(ascii: ","):
                expectingValue = nesting.last == UInt8(ascii: "[")
                quoteStartsKey = true
            default:
                break
            }
        }
        if mode == .bareValue, !TOMLBareValue.isValid(bareValue) { return invalidValue(bareValue, line) }
        return nil
    }

    private static func invalidValue(_ value: [UInt8], _ line: Int) -> Problem {
        let shown = String(decoding: value.prefix(TOMLBareValue.maximumLength), as: UTF8.self)
        return Problem(line: line, message: "invalid value \(shown)\(value.count > TOMLBareValue.maximumLength ? "…" : "") (strings need quotes)")
    }

    private static func openString(_ delimiter: UInt8, at start: Int, advancing index: inout Int, run: (UInt8, Int) -> Int) -> Mode {
        let isMultiline = run(delimiter, start) >= 3
        if isMultiline { index += 2 }
        if delimiter == quote { return isMultiline ? .multilineBasic : .basic }
        return isMultiline ? .multilineLiteral : .literal
    }

    private static func nonASCII(_ line: Int) -> Problem {
        Problem(line: line, message: "non-ASCII character outside a string or comment")
    }

    /// toml++'s test for "could be a date with a space instead of a T" (looser than a
    /// real date; toml++ ignores underscores when counting).
    private static func isDateShaped(_ value: [UInt8]) -> Bool {
        let chars = value.filter { $0 != UInt8(ascii: "_") }
        return chars.count == 10 && isDigit(chars[0]) && chars[4] == UInt8(ascii: "-") && chars[7] == UInt8(ascii: "-")
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private static func isBlank(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r") || byte == newline
    }

    /// What ends an unquoted value for toml++ (its `is_value_terminator`, ASCII part).
    private static func isValueTerminator(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), newline,
             UInt8(ascii: "]"), UInt8(ascii: "}"), UInt8(ascii: ","), UInt8(ascii: "#"):
            return true
        default:
            return false
        }
    }

    private static func isKeyStart(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "-"), quote, apostrophe, UInt8(ascii: "]"):
            return true
        default:
            return false
        }
    }
}
