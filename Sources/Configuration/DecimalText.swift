/// A non-negative decimal number scanned from text ("12", "1.5", ".25"), kept as
/// its digits so it can be scaled to an integer unit exactly, without `Double`.
struct DecimalText {
    var integerDigits: Substring
    var fractionDigits: Substring

    /// Scans the longest decimal number at the start of `text`; returns it and the rest.
    static func scan(_ text: Substring) -> (DecimalText, Substring)? {
        let integer = text.prefix(while: { $0.isASCII && $0.isNumber })
        var rest = text.dropFirst(integer.count)
        var fraction: Substring = ""
        if rest.first == "." {
            fraction = rest.dropFirst().prefix(while: { $0.isASCII && $0.isNumber })
            rest = rest.dropFirst(1 + fraction.count)
        }
        guard !integer.isEmpty || !fraction.isEmpty else { return nil }
        return (DecimalText(integerDigits: integer, fractionDigits: fraction), rest)
    }

    /// The value times `unit` (which must be positive), rounded down to an integer;
    /// nil on Int64 overflow.
    func scaled(by unit: Int64) -> Int64? {
        var whole: Int64 = 0
        for digit in integerDigits {
            guard let value = digit.wholeNumberValue else { return nil }
            let (times10, o1) = whole.multipliedReportingOverflow(by: 10)
            let (next, o2) = times10.addingReportingOverflow(Int64(value))
            guard !o1, !o2 else { return nil }
            whole = next
        }
        let (result, overflow) = whole.multipliedReportingOverflow(by: unit)
        guard !overflow else { return nil }
        // fraction = F / 10^k exactly; F * unit can exceed 64 bits, so multiply full
        // width. Digits past the 18th cannot matter for units up to an hour in ns.
        var numerator: UInt64 = 0
        var denominator: UInt64 = 1
        for digit in fractionDigits.prefix(18) {
            guard let value = digit.wholeNumberValue else { return nil }
            numerator = numerator * 10 + UInt64(value)
            denominator *= 10
        }
        let product = UInt64(unit).multipliedFullWidth(by: numerator)
        let fractionPart = Int64(denominator.dividingFullWidth(product).quotient)
        let (sum, overflow2) = result.addingReportingOverflow(fractionPart)
        return overflow2 ? nil : sum
    }
}

extension String {
    /// Trims spaces, tabs and newlines only: config values are ASCII syntax, and
    /// Foundation's Unicode-aware trimming would accept odd separators silently.
    func trimmingASCIIWhitespace() -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        let start = self.drop(while: isSpace)
        var end = start.endIndex
        while end > start.startIndex, isSpace(start[start.index(before: end)]) {
            end = start.index(before: end)
        }
        return start[start.startIndex..<end]
    }
}
