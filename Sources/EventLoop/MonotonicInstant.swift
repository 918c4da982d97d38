#if canImport(Glibc)
import DurationUnits
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A point on CLOCK_MONOTONIC, in nanoseconds: what the loop's timers run on
/// (a virtual loop's: a point in its virtual time, `EventLoop.now`).
/// Wall-clock changes (NTP, an admin's `date`) never move it.
public struct MonotonicInstant: InstantProtocol, Hashable, Sendable {
    public let nanoseconds: UInt64

    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    public static var now: MonotonicInstant {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return MonotonicInstant(nanoseconds: UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec))
    }

    public static func < (a: MonotonicInstant, b: MonotonicInstant) -> Bool { a.nanoseconds < b.nanoseconds }

    public static func + (a: MonotonicInstant, d: Duration) -> MonotonicInstant {
        let ns = d.wholeNanoseconds
        return MonotonicInstant(nanoseconds: ns >= 0 ? a.nanoseconds &+ UInt64(ns) : a.nanoseconds &- min(a.nanoseconds, UInt64(-ns)))
    }

    public func advanced(by duration: Duration) -> MonotonicInstant { self + duration }

    public func duration(to other: MonotonicInstant) -> Duration {
        other.nanoseconds >= nanoseconds
            ? .nanoseconds(Int64(clamping: other.nanoseconds - nanoseconds))
            : .nanoseconds(-Int64(clamping: nanoseconds - other.nanoseconds))
    }

    /// Milliseconds until `deadline`, rounded up (epoll's unit), 0 if past.
    func millisecondsUntil(_ deadline: MonotonicInstant) -> Int32 {
        guard deadline.nanoseconds > nanoseconds else { return 0 }
        let ns = deadline.nanoseconds - nanoseconds
        return Int32(clamping: (ns + 999_999) / 1_000_000)
    }

    /// Sleeps the calling thread until `deadline` (nothing else runs meanwhile).
    static func sleep(until deadline: MonotonicInstant) {
        var spec = timespec(tv_sec: Int(deadline.nanoseconds / 1_000_000_000), tv_nsec: Int(deadline.nanoseconds % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &spec, nil) == EINTR {}
    }
}
