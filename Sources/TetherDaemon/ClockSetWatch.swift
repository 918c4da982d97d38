import DurationUnits
import EventLoop
import FoundationEssentials
import Readings
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Notices the system clock being set as it happens (a timerfd with
/// `TFD_TIMER_CANCEL_ON_SET` on the loop: no polling, no wake-up until a
/// step) and says so once per step: how far it moved, from what to what.
///
/// Nothing Tether decides depends on the wall clock (timers and backoff run
/// on the monotonic clock; rotation, retention and the forwarder's cursor
/// on sizes and seqs); the readings' `ts` does, and each record carries
/// `boot_ms` and `clock_synced` to repair it (`BootStamp`). The line tells
/// an operator reading the journal why `ts` jumps there.
public enum ClockSetWatch {
    /// A step of the wall clock, measured against CLOCK_BOOTTIME.
    public struct Step: Sendable, Equatable {
        /// The wall clock before and after the step (both read as boot time
        /// plus the wall's offset from it).
        public var before: Date
        public var after: Date

        public var moved: Duration {
            .milliseconds(Int64(((after.timeIntervalSince1970 - before.timeIntervalSince1970) * 1000).rounded()))
        }

        /// "the system clock was set forward by 56 years 339 days (it read 1970-01-01T00:00:42.000Z; now 2026-12-06T10:31:00.000Z)".
        /// `moved` in milliseconds (the journal's `moved_ms`).
        public var movedMilliseconds: Int64 {
            moved.wholeMilliseconds
        }

        public var description: String {
            let milliseconds = abs(movedMilliseconds)
            let direction = moved < .zero ? "back" : "forward"
            return "the system clock was set \(direction) by \(Self.span(milliseconds)) (it read \(UTCTimestamp.string(before)); now \(UTCTimestamp.string(after))); readings keep boot_ms and clock_synced to date them by"
        }

        /// A span as a person reads it: years (of 365 days) and days, days and
        /// hours, hours and minutes, or seconds.
        static func span(_ milliseconds: Int64) -> String {
            let seconds = milliseconds / 1000
            let days = seconds / 86_400
            if days >= 365 { return "\(days / 365) years \(days % 365) days" }
            if days >= 1 { return "\(days) days \(seconds % 86_400 / 3600) hours" }
            if seconds >= 3600 { return "\(seconds / 3600) hours \(seconds % 3600 / 60) minutes" }
            let fraction = milliseconds % 1000
            return "\(seconds).\(fraction < 100 ? (fraction < 10 ? "00" : "0") : "")\(fraction) s"
        }
    }

    /// Calls `onStep` on `loop` for each step of the wall clock until the
    /// task is cancelled. Throws when the timerfd cannot be made or read.
    public static func run(
        on loop: EventLoop, wallClock: @escaping @Sendable () -> Date = { Date() }, onStep: @escaping @Sendable (Step) -> Void
    ) async throws(ClockSteps.Unavailable) {
        let failure = await LoopWait<Int32>(on: loop).value { wait in
            // The wall clock's offset from boot time: what a step changes.
            var offset = wallClock().timeIntervalSince1970 - Self.sinceBoot()
            let steps: ClockSteps
            do throws(ClockSteps.Unavailable) {
                steps = try ClockSteps(loop: loop, onSet: {
                    let boot = Self.sinceBoot()
                    let now = offset + boot
                    offset = wallClock().timeIntervalSince1970 - boot
                    onStep(Step(before: Date(timeIntervalSince1970: now), after: Date(timeIntervalSince1970: offset + boot)))
                }, onFailure: { wait.resume($0.errno) })
            } catch {
                wait.resume(error.errno)
                return {}
            }
            return { steps.stop() }
        }
        if let failure { throw ClockSteps.Unavailable(errno: failure) }
    }

    /// Boot time in seconds, the unit of `Date`'s arithmetic here.
    private static func sinceBoot() -> Double {
        BootClock.sinceBoot().inSeconds
    }
}
