/// A non-negative decimal number scanned from text ("12", "1.5", ".25"), kept as
/// its digits so it can be scaled to an integer unit exactly, without `Double`.
struct DecimalText {
    var integerDigits: Substring
    var fractionDigits: Substring

    /// Scans the longest decimal number at the start of `text`; returns it and the rest.
    static func scan(_ text: Substring) -> (DecimalText, Substring)? {
        let integer = text.prefix(while: { Self.digitValue($0) != nil })
        var rest = text.dropFirst(integer.count)
        var fraction: Substring = ""
        if rest.first == "." {
            fraction = rest.dropFirst().prefix(while: { Self.digitValue($0) != nil })
            rest = rest.dropFirst(1 + fraction.count)
        }
        guard !integer.isEmpty || !fraction.isEmpty else { return nil }
        return (DecimalText(integerDigits: integer, fractionDigits: fraction), rest)
    }

    /// 0–9 for an ASCII digit, else nil. Not `isNumber` and `wholeNumberValue`,
    /// which look every character up in the standard library's Unicode tables
    /// to then accept only ASCII digits here anyway.
    static func digitValue(_ character: Character) -> UInt8? {
        guard let ascii = character.asciiValue, ascii >= UInt8(ascii: "0"), ascii <= UInt8(ascii: "9") else { return nil }
        return ascii - UInt8(ascii: "0")
    }

    /// The value times `unit` (which must be positive), rounded down to an integer;
    /// nil on Int64 overflow.
    func scaled(by unit: Int64) -> Int64? {
        var whole: Int64 = 0
        for digit in integerDigits {
            guard let value = Self.digitValue(digit) else { return nil }
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
            guard let value = Self.digitValue(digit) else { return nil }
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
    /// On the UTF-8 bytes, not on characters: an ASCII byte is never part of
    /// another scalar, and walking characters backwards brought in the
    /// standard library's grapheme-breaking code for this alone.
    func trimmingASCIIWhitespace() -> Substring {
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
        let bytes = utf8
        let start = bytes.firstIndex(where: { !isSpace($0) }) ?? bytes.endIndex
        var end = bytes.endIndex
        while end > start, isSpace(bytes[bytes.index(before: end)]) {
            end = bytes.index(before: end)
        }
        return self[start..<end]
    }
}
