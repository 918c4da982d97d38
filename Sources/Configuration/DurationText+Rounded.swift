import Foundation
extension DurationText {
    /// A duration for people reading logs: rounded to milliseconds, e.g.
    /// "0ms", "539ms", "1.1s", "12.35s", "3m05s". Not meant to be parsed back
    /// (use `format` for that).
    public static func rounded(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
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
            var text = String(ms / 1000) + "." + String(format: "%03d", Int(ms % 1000))
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
            return "\(sign)\(text)s"
        default:
            let totalSeconds = (ms + 500) / 1000
            return "\(sign)\(totalSeconds / 60)m" + String(format: "%02d", Int(totalSeconds % 60)) + "s"
        }
    }
}
