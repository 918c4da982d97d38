import CoreMetrics

extension CoreMetrics.Counter {
    /// Brings the counter from `before` up to `now`, for a number kept
    /// elsewhere (the recorder's, the forwarder's) and read at each write.
    /// Adds nothing when `now` did not grow.
    public func advance(to now: UInt64, from before: UInt64) {
        guard now > before, now - before < UInt64(Int64.max) else { return }
        increment(by: Int64(now - before))
    }
}
