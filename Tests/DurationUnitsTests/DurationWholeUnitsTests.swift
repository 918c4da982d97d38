import DurationUnits
import Testing

@Suite struct DurationWholeUnitsTests {
    @Test func wholeUnitsTruncateTowardZero() {
        let duration = Duration.seconds(2) + .nanoseconds(999_999_999)
        #expect(duration.wholeMilliseconds == 2999)
        #expect(duration.wholeMicroseconds == 2_999_999)
        #expect(duration.wholeNanoseconds == 2_999_999_999)
        // components gives a negative duration's seconds and attoseconds the same sign: truncation, as C's.
        #expect((.zero - duration).wholeMilliseconds == -2999)
        #expect(Duration.nanoseconds(-1).wholeMilliseconds == 0)
        #expect(Duration.milliseconds(1500).wholeMilliseconds == 1500)
    }

    @Test func durationsTooLongForTheUnitSaturateInsteadOfTrapping() {
        let forever = Duration.seconds(Int64.max)
        #expect(forever.wholeMilliseconds == .max)
        #expect(forever.wholeMicroseconds == .max)
        #expect(forever.wholeNanoseconds == .max)
        #expect((.zero - forever).wholeNanoseconds == .min)
        // Just past Int64 nanoseconds through the fraction (the addition overflows, not the product).
        let edge = Duration.seconds(Int64.max / 1_000_000_000) + .nanoseconds(999_999_999)
        #expect(edge.wholeNanoseconds == .max)
        // The widest that fits in milliseconds is still exact.
        #expect(Duration.seconds(Int64.max / 1000).wholeMilliseconds == Int64.max / 1000 * 1000)
    }

    @Test func secondsAsDouble() {
        #expect(Duration.milliseconds(1500).inSeconds == 1.5)
        #expect(Duration.milliseconds(-250).inSeconds == -0.25)
        #expect(Duration.zero.inSeconds == 0)
    }
}
