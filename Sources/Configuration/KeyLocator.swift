/// Finds the line on which a dotted key ("keepalive.interval") is defined.
///
/// TOMLKit does not expose node positions, so we re-scan the source text with a
/// deliberately small subset of TOML: table headers, `key = value` lines (bare,
/// quoted and dotted keys) and multi-line strings (so their contents are not taken
/// for keys). Anything it cannot follow, such as keys inside inline tables, simply
/// has no line; errors then carry `line == nil` rather than a wrong line.
struct KeyLocator {
    /// First line (1-based) on which each dotted path is defined or opened.
    private var firstLine: [String: Int] = [:]

    init(source: String) {
        var table: [String] = []
        var openMultiline: Substring?  // closing delimiter of a multi-line string in progress
        for (index, rawLine) in Self.lines(of: source).enumerated() {
            let lineNumber = index + 1
            var line = rawLine[...]
            if let delimiter = openMultiline {
                if line.contains(delimiter) { openMultiline = nil }
                continue
            }
            line = line.drop(while: { $0 == " " || $0 == "\t" })
            if line.hasPrefix("[") {
                let isArrayHeader = line.hasPrefix("[[")
                // Requiring the closing bracket keeps array values split over lines
                // (`  ["a", "b"],`) from being mistaken for headers.
                guard let (path, rest) = Self.keyPath(line.dropFirst(isArrayHeader ? 2 : 1)),
                      rest.hasPrefix(isArrayHeader ? "]]" : "]")
                else { continue }
                table = path
                record(path, line: lineNumber)
            } else if let (path, rest) = Self.keyPath(line), rest.first == "=" {
                record(table + path, line: lineNumber)
                let value = rest.dropFirst().drop(while: { $0 == " " || $0 == "\t" })
                for delimiter in ["\"\"\"", "'''"] where value.hasPrefix(delimiter) {
                    if !value.dropFirst(3).contains(delimiter) { openMultiline = delimiter[...] }
                }
            }
        }
    }

    /// The line of `key`, or nil when the scan did not see it.
    func line(of key: String) -> Int? {
        firstLine[key]
    }

    /// Splits on "\n", which Swift keeps inside the single Character "\r\n".
    private static func lines(of source: String) -> [Substring] {
        source.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
    }

    private mutating func record(_ path: [String], line: Int) {
        // Dotted keys also define their parent tables (`a.b = 1` defines `a`).
        for last in path.indices {
            let key = path.prefix(last + 1).joined(separator: ".")
            if firstLine[key] == nil { firstLine[key] = line }
        }
    }

    /// Parses `a."b c".d` at the start of `text`; returns the segments and the text
    /// after the path and any following blanks.
    private static func keyPath(_ text: Substring) -> ([String], Substring)? {
        var segments: [String] = []
        var rest = text
        while true {
            rest = rest.drop(while: { $0 == " " || $0 == "\t" })
            guard let (segment, after) = keySegment(rest) else { return nil }
            segments.append(segment)
            rest = after.drop(while: { $0 == " " || $0 == "\t" })
            guard rest.first == "." else { return (segments, rest) }
            rest = rest.dropFirst()
        }
    }

    private static func keySegment(_ text: Substring) -> (String, Substring)? {
        guard let first = text.first else { return nil }
        if first == "\"" || first == "'" {
            var value = ""
            var index = text.index(after: text.startIndex)
            while index < text.endIndex {
                let character = text[index]
                if character == first { return (value, text[text.index(after: index)...]) }
                if character == "\\", first == "\"" {
                    // Approximate escapes: enough to find the closing quote.
                    index = text.index(after: index)
                    guard index < text.endIndex else { return nil }
                }
                value.append(text[index])
                index = text.index(after: index)
            }
            return nil
        }
        let bare = text.prefix(while: TOMLBareKey.allows)
        guard !bare.isEmpty else { return nil }
        return (String(bare), text.dropFirst(bare.count))
    }
}
