import Testing
import TetherDaemon

/// The control API's bound on Reconnect, on a driven clock.
@Suite struct ReconnectRateLimitTests {
    @Test func aBurstIsAcceptedThenRefusedUntilTheOldestLeavesTheWindow() {
        var limit = ReconnectRateLimit()
        for second in 0..<ReconnectRateLimit.burst {
            #expect(limit.request(at: .seconds(second)) == .accepted)
        }
        // Three at 0, 1, 2 s: the fourth at 5 s waits until the one at 0 s is 30 s old.
        #expect(limit.request(at: .seconds(5)) == .refused(retryAfter: .seconds(25)))
        #expect(limit.request(at: .seconds(29)) == .refused(retryAfter: .seconds(1)))
        #expect(limit.request(at: .seconds(30)) == .accepted)
        #expect(limit.request(at: .seconds(30)) == .refused(retryAfter: .seconds(1)))
    }

    @Test func refusedRequestsDoNotCount() {
        var limit = ReconnectRateLimit()
        for _ in 0..<ReconnectRateLimit.burst { _ = limit.request(at: .zero) }
        for tenth in 1...100 { _ = limit.request(at: .milliseconds(tenth * 100)) }
        #expect(limit.request(at: ReconnectRateLimit.window) == .accepted)
    }
}
