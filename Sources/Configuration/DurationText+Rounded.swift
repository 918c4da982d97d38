import Pacing

extension DurationText {
    /// A duration for people reading logs: rounded to milliseconds, e.g.
    /// "0ms", "539ms", "1.1s", "12.35s", "3m05s". Not meant to be parsed back
    /// (use `format` for that). The text is `Duration.roundedText` (in
    /// Pacing), the supervisor's too, so logs from both read alike.
    public static func rounded(_ duration: Duration) -> String {
        duration.roundedText
    }
}
