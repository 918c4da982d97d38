/// Converts between `Duration` and the short text form used in the config file
/// ("250ms", "5s", "1.5s", "3m", "1h", "1m30s").
///
/// Parsing is exact integer arithmetic on nanoseconds (no `Double` rounding), so
/// "0.1s" is exactly 100 ms; anything finer than a nanosecond is dropped.
public enum DurationText {
    /// Units accepted by `parse`, longest spelling first so "ms" wins over "m".
    private static let units: [(suffix: String, nanoseconds: Int64)] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ]

    /// Parses a duration such as "250ms", "5s", "1.5s", "3m", "1h" or "1m30s".
    /// A leading "-" is accepted (the config validation rejects negative values with
    /// a clearer message than "not a duration"). Returns nil for anything else,
    /// including values that overflow 64-bit nanoseconds (about 292 years).
    public static func parse(_ text: String) -> Duration? {
        var rest = Substring(text.trimmingASCIIWhitespace())
        var negative = false
        if rest.first == "-" {
            negative = true
            rest = rest.dropFirst()
        } else if rest.first == "+" {
            rest = rest.dropFirst()
        }
        guard !rest.isEmpty else { return nil }

        var total: Int64 = 0
        while !rest.isEmpty {
            guard let (number, afterNumber) = DecimalText.scan(rest) else { return nil }
            let afterSpace = afterNumber.drop(while: { $0 == " " })
            let unitText = afterSpace.prefix(while: { $0.isLetter })
            guard let unit = units.first(where: { $0.suffix == unitText }) else { return nil }
            guard let part = number.scaled(by: unit.nanoseconds) else { return nil }
            let (sum, overflow) = total.addingReportingOverflow(part)
            guard !overflow else { return nil }
            total = sum
            rest = afterSpace.dropFirst(unitText.count).drop(while: { $0 == " " })
        }
        return .nanoseconds(negative ? -total : total)
    }

    /// Formats a duration in the largest unit that represents it exactly
    /// ("3m", "5s", "250ms"); non-whole seconds above one second use a decimal
    /// ("1.5s"). `parse(format(d)) == d` for every whole-nanosecond duration.
    public static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        // Duration's own range is wider than Int64 nanoseconds; clamp rather than trap.
        let (secondsNanos, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (nanos, overflow2) = secondsNanos.addingReportingOverflow(attoseconds / 1_000_000_000)
        guard !overflow, !overflow2 else { return "\(seconds)s" }
        if nanos == 0 { return "0s" }
        let sign = nanos < 0 ? "-" : ""
        let magnitude = nanos.magnitude
        for (suffix, size) in [("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000)] as [(String, UInt64)]
        where magnitude % size == 0 {
            return "\(sign)\(magnitude / size)\(suffix)"
        }
        if magnitude >= 1_000_000_000 {
            var fraction = String(magnitude % 1_000_000_000)
            fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
            while fraction.last == "0" { fraction.removeLast() }
            return "\(sign)\(magnitude / 1_000_000_000).\(fraction)s"
        }
        for (suffix, size) in [("ms", 1_000_000), ("us", 1_000)] as [(String, UInt64)] where magnitude % size == 0 {
            return "\(sign)\(magnitude / size)\(suffix)"
        }
        return "\(sign)\(magnitude)ns"
    }
}
