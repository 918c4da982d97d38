import LinkPolicy
@testable import LinkSupervisor
import Pacing
import Testing

@Suite struct ReconnectPolicyTests {
    let policy = ReconnectPolicy(
        firstDelay: .zero, initialBackoff: .seconds(1), maxBackoff: .seconds(30), jitter: 0.2,
        connectTimeout: .seconds(20), window: .seconds(180), windowAttempts: 12, cooldown: .seconds(300)
    )

    @Test func baseDelaysDoubleUpToTheCap() {
        let delays = (1...9).map { policy.baseDelay(beforeAttempt: $0) }
        #expect(delays == [.zero, .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30), .seconds(30)])
        #expect(policy.baseDelay(beforeAttempt: 10_000) == .seconds(30))
    }

    @Test func jitterStaysWithinItsBounds() {
        var random = SplitMix64(seed: 42)
        for n in 2...14 {
            let base = policy.baseDelay(beforeAttempt: n)
            for _ in 0..<200 {
                let delay = policy.delay(beforeAttempt: n, unit: random.nextUnit())
                #expect(delay >= base * 0.8 && delay <= base * 1.2, "attempt \(n): \(delay) vs \(base)")
            }
        }
        #expect(policy.delay(beforeAttempt: 3, unit: 0) == .seconds(2) * 0.8)
        #expect(policy.delay(beforeAttempt: 3, unit: 0.5) == .seconds(2))
    }

    @Test func jitterActuallySpreadsDelays() {
        var random = SplitMix64(seed: 7)
        let delays = Set((0..<50).map { _ in policy.delay(beforeAttempt: 5, unit: random.nextUnit()) })
        #expect(delays.count > 40)
    }

    @Test func firstAttemptIsNeverJittered() {
        var custom = policy
        custom.firstDelay = .milliseconds(250)
        #expect(custom.delay(beforeAttempt: 1, unit: 0.99) == .milliseconds(250))
        #expect(policy.delay(beforeAttempt: 1, unit: 0.0) == .zero)
    }

    @Test func windowBoundsAttemptsAndTime() {
        #expect(policy.windowAllows(attempt: 11, at: .seconds(10), windowStart: .zero))
        #expect(!policy.windowAllows(attempt: 12, at: .seconds(10), windowStart: .zero))
        #expect(!policy.windowAllows(attempt: 3, at: .seconds(180), windowStart: .zero))
    }

    @Test func seededGeneratorIsDeterministicAndInRange() {
        var a = SplitMix64(seed: 99)
        var b = SplitMix64(seed: 99)
        for _ in 0..<100 {
            let x = a.nextUnit()
            #expect(x == b.nextUnit())
            #expect(x >= 0 && x < 1)
        }
    }
}
