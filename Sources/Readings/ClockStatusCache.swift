/// When a record's `clock_synced` is asked of the kernel again.
///
/// Asking on every reading costs a system call each (under the units, a
/// denied adjtimex and two access calls), and the answer changes once a boot
/// or so; so an answer is kept for a second of boot time. But a step of the
/// clock changes it at once: the kernel marks the clock unsynchronised on
/// every `settimeofday`/`clock_settime` (and an NTP client marks it
/// synchronised right after its own step). A kept answer would then date a
/// reading taken after someone set the clock back by hand as synchronised,
/// with a `ts` hours off that no backend would repair. So a kept answer is
/// dropped as soon as the wall clock no longer stands where it stood against
/// boot time when the answer was taken.
///
/// Invariant: an answer is returned only while less than `keepFor` of boot
/// time has passed since it was asked and the wall clock has moved against
/// boot time by less than `stepTolerance` since then.
public struct ClockStatusCache: Sendable {
    /// A slewing NTP client moves the clock by at most 500 ppm (0.5 ms a
    /// second): 50 ms is far beyond that and far below any step worth telling.
    public static let stepTolerance: Duration = .milliseconds(50)
    public static let keepFor: Duration = .seconds(1)

    private var kept: (askedAt: Duration, wallMinusBoot: Duration, synchronised: Bool?)?

    public init() {}

    /// The status for a reading taken at `sinceBoot` (CLOCK_BOOTTIME) and
    /// `wall` (CLOCK_REALTIME since the epoch); `ask` reads the kernel's.
    public mutating func status(sinceBoot: Duration, wall: Duration, ask: () -> Bool?) -> Bool? {
        let wallMinusBoot = wall - sinceBoot
        if let kept, sinceBoot - kept.askedAt < Self.keepFor, sinceBoot >= kept.askedAt,
           (Duration.zero - Self.stepTolerance) < wallMinusBoot - kept.wallMinusBoot,
           wallMinusBoot - kept.wallMinusBoot < Self.stepTolerance {
            return kept.synchronised
        }
        let fresh = ask()
        kept = (sinceBoot, wallMinusBoot, fresh)
        return fresh
    }
}
