/// The one way Tether paces something it repeats while it keeps failing
/// (a reconnect, a power-on, a liveness ping, a controller re-check, the
/// bus, the broker): `first`, doubled after each failure, never above `cap`.
///
/// A value: it holds no clock and no count of its own but the one a caller
/// keeps (`failures`), so a state machine stores it in the state that owns
/// the failures and a test reads the delays off directly.
///
/// Invariants: `delay(afterFailures:)` is `first` for 0 (and any negative
/// count), never exceeds `cap` (nor falls below `first` when `first <= cap`),
/// and is computed without overflow for any count.
public struct Backoff: Sendable, Equatable {
    public var first: Duration
    public var cap: Duration

    public init(first: Duration, cap: Duration) {
        self.first = first
        self.cap = cap
    }

    /// `first` doubled `failures` times, at most `cap`.
    public func delay(afterFailures failures: Int) -> Duration {
        var delay = first
        // 62 doublings take any positive duration past any cap; stop early.
        for _ in 0..<min(max(failures, 0), 62) {
            if delay >= cap { break }
            delay = delay * 2
        }
        return min(delay, cap)
    }

    /// `delay` spread by ±`jitter` (a fraction in [0, 1)) with `unit`, a
    /// value in [0, 1) drawn by the caller (`SplitMix64.nextUnit`): a value
    /// in [delay·(1−jitter), delay·(1+jitter)]. Jitter keeps a fleet of
    /// gateways that failed together from retrying in lock step.
    public static func jittered(_ delay: Duration, by jitter: Double, unit: Double) -> Duration {
        guard jitter > 0 else { return delay }
        return delay * (1 + jitter * (2 * min(max(unit, 0), 1) - 1))
    }
}
