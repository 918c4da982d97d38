/// Fixed-width text for the log's level column and the CLI's tables, and
/// fixed-point figures, without Foundation's `padding`/`String(format:)`:
/// those live in the full Foundation, which links ICU (37 MB) into the binary.
extension StringProtocol {
    /// `self` cut or padded with spaces to `width` characters.
    public func padded(to width: Int) -> String {
        count >= width ? String(prefix(width)) : String(self) + String(repeating: " ", count: width - count)
    }
}

public enum FixedPoint {
    /// `value` with exactly `digits` decimals (rounded half away from zero).
    public static func text(_ value: Double, digits: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        guard scaled < 9e18 else { return "\(value)" }
        let units = Int64(scaled)
        let divisor = Int64(scale)
        let whole = units / divisor
        let sign = value < 0 && units != 0 ? "-" : ""
        guard digits > 0 else { return "\(sign)\(whole)" }
        let fraction = String(units % divisor)
        return "\(sign)\(whole)." + String(repeating: "0", count: digits - fraction.count) + fraction
    }
}
