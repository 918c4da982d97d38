extension Duration {
    /// This duration for people reading logs: rounded to milliseconds, e.g.
    /// "0ms", "539ms", "1.1s", "12.35s", "3m05s". Not meant to be parsed back
    /// (the config's `DurationText.format` is). Standard library only; the
    /// supervisor's messages and the config's `DurationText.rounded` alike.
    public var roundedText: String {
        let (seconds, attoseconds) = components
        // Durations beyond ±292 million years do not fit in milliseconds; nobody waits that long.
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        guard !overflow else { return seconds < 0 ? "-forever" : "forever" }
        let totalMilliseconds = scaled + (attoseconds + 500_000_000_000_000) / 1_000_000_000_000_000
        let sign = totalMilliseconds < 0 ? "-" : ""
        let ms = totalMilliseconds.magnitude
        switch ms {
        case ..<1000:
            return "\(sign)\(ms)ms"
        case ..<60_000:
            var text = String(ms / 1000) + "." + zeroPadded(ms % 1000, width: 3)
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
            return "\(sign)\(text)s"
        default:
            let totalSeconds = (ms + 500) / 1000
            return "\(sign)\(totalSeconds / 60)m" + zeroPadded(totalSeconds % 60, width: 2) + "s"
        }
    }
}

/// `value` in decimal with leading zeros up to `width` digits (printf's `%0*d`).
private func zeroPadded(_ value: UInt64, width: Int) -> String {
    let digits = String(value)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}
