/// A `Duration` in the units system calls, records and metrics take.
///
/// `Duration` keeps attoseconds in 128 bits and offers only `components`;
/// every module that hands a duration to poll(2), a record's `boot_ms` or a
/// metric used to do that arithmetic for itself (the unchecked copies trapped
/// on a duration too long for the unit). It is done once here. Saturation
/// hides the overflow: where it must be told apart (the config's
/// `DurationText.format`, which falls back to whole seconds), check
/// `components` directly.
///
/// Invariants: whole units truncate toward zero (as C's integer division,
/// what `components` gives for a negative duration) and saturate at Int64's
/// bounds instead of trapping: a timeout of "forever" becomes the longest one
/// the unit can say. Standard library only.
extension Duration {
    /// Whole milliseconds (poll(2) timeouts, `boot_ms`, the journal's `_ms` fields).
    public var wholeMilliseconds: Int64 { whole(attosecondsPerUnit: 1_000_000_000_000_000) }

    /// Whole microseconds (the status's `_us` fields).
    public var wholeMicroseconds: Int64 { whole(attosecondsPerUnit: 1_000_000_000_000) }

    /// Whole nanoseconds (monotonic instants, metrics).
    public var wholeNanoseconds: Int64 { whole(attosecondsPerUnit: 1_000_000_000) }

    /// Seconds as a `Double`, for figures people read (`1.5`, `0.25`): not exact
    /// beyond microseconds over days; use a whole unit where exactness matters.
    public var inSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    private func whole(attosecondsPerUnit: Int64) -> Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000_000_000_000 / attosecondsPerUnit)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / attosecondsPerUnit)
        return overflow2 ? (seconds < 0 ? .min : .max) : sum
    }
}
