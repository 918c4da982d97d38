import Pacing
import Testing

@Suite struct BackoffTests {
    let backoff = Backoff(first: .milliseconds(500), cap: .seconds(10))

    @Test func firstDoublesUpToTheCap() {
        let delays = (0...7).map { backoff.delay(afterFailures: $0) }
        #expect(delays == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10), .seconds(10)])
    }

    @Test func anyCountIsBoundedAndNegativeIsTheFirst() {
        #expect(backoff.delay(afterFailures: -3) == .milliseconds(500))
        #expect(backoff.delay(afterFailures: Int.max) == .seconds(10))
        let tiny = Backoff(first: .nanoseconds(1), cap: .seconds(86_400 * 365))
        #expect(tiny.delay(afterFailures: Int.max) == .seconds(86_400 * 365))
    }

    @Test func aFirstAboveTheCapIsCapped() {
        #expect(Backoff(first: .seconds(30), cap: .seconds(5)).delay(afterFailures: 0) == .seconds(5))
    }

    @Test func jitterStaysWithinItsFraction() {
        var random = SplitMix64(seed: 9)
        for _ in 0..<1000 {
            let delay = Backoff.jittered(.seconds(10), by: 0.2, unit: random.nextUnit())
            #expect(delay >= .seconds(8) && delay <= .seconds(12))
        }
        #expect(Backoff.jittered(.seconds(10), by: 0, unit: 0.99) == .seconds(10))
        // Out-of-range units are clamped, never a negative delay.
        #expect(Backoff.jittered(.seconds(10), by: 0.5, unit: -4) == .seconds(5))
        #expect(Backoff.jittered(.seconds(10), by: 0.5, unit: 7) == .seconds(15))
    }
}

@Suite struct SplitMix64Tests {
    @Test func aSeedReplays() {
        var a = SplitMix64(seed: 0x7e7_4e2)
        var b = SplitMix64(seed: 0x7e7_4e2)
        #expect((0..<100).map { _ in a.next() } == (0..<100).map { _ in b.next() })
    }

    /// The published first outputs of SplitMix64 for seed 0 (Vigna's
    /// reference implementation), so the generator is the one named.
    @Test func itIsSplitMix64() {
        var random = SplitMix64(seed: 0)
        #expect(random.next() == 0xE220_A839_7B1D_CDAF)
        #expect(random.next() == 0x6E78_9E6A_A1B9_65F4)
    }

    @Test func unitsAreInTheHalfOpenInterval() {
        var random = SplitMix64(seed: 1)
        for _ in 0..<10_000 {
            let unit = random.nextUnit()
            #expect(unit >= 0 && unit < 1)
        }
    }
}
