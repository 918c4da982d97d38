import Testing
@testable import TetherDaemon

/// Each drop is told when it happens and counted once; its reason comes
/// with it or after it, never moving the drop's line later.
@Suite struct DropAccountTests {
    static let dongle = "AA:BB:CC:DD:EE:FF"
    static let kernel = "the kernel's management socket"

    func drop(_ account: inout DropAccount, at seconds: Int, source: String? = Self.kernel) -> [DropAccount.Effect] {
        account.dropNoticed(
            unexpected: true, address: Self.dongle, device: Self.dongle, at: .seconds(seconds), source: source,
            unavailableWhy: "no source")
    }

    @Test func aReasonHeardFirstIsInTheDropsOwnLine() {
        var account = DropAccount()
        #expect(account.reasonHeard(.remote, address: "aa:bb:cc:dd:ee:ff", at: .seconds(10)).isEmpty)
        #expect(drop(&account, at: 10) == [
            .logDrop(unexpected: true, reason: .remote, toFollowFrom: nil, why: nil, device: Self.dongle), .count(.remote),
        ])
    }

    @Test func aReasonHeardAfterFollowsAsItsOwnLine() {
        var account = DropAccount()
        #expect(drop(&account, at: 10) == [
            .logDrop(unexpected: true, reason: nil, toFollowFrom: Self.kernel, why: nil, device: Self.dongle),
            .startWait(DropAccount.wait),
        ])
        #expect(account.reasonHeard(.connectionTimeout, address: Self.dongle, at: .seconds(10) + .milliseconds(40)) == [
            .cancelWait, .logReason(.connectionTimeout, why: nil, droppedAt: .seconds(10), device: Self.dongle),
            .count(.connectionTimeout),
        ])
        #expect(account.waitEnded().isEmpty, "counted once")
    }

    @Test func noReasonWithinTheWaitIsSaidAndCountedAsUnavailable() {
        var account = DropAccount()
        _ = drop(&account, at: 10)
        #expect(account.waitEnded() == [
            .cancelWait, .logReason(.unavailable, why: "no reason from \(Self.kernel) within 1s", droppedAt: .seconds(10), device: Self.dongle),
            .count(.unavailable),
        ])
        // A reason that comes later still is not pinned on this drop, nor on the next.
        #expect(account.reasonHeard(.remote, address: Self.dongle, at: .seconds(12)).isEmpty)
        #expect(drop(&account, at: 15).first == .logDrop(unexpected: true, reason: nil, toFollowFrom: Self.kernel, why: nil, device: Self.dongle))
    }

    @Test func withoutASourceTheDropSaysUnavailableAtOnceAndIsCountedOnce() {
        var account = DropAccount()
        #expect(drop(&account, at: 10, source: nil) == [
            .logDrop(unexpected: true, reason: .unavailable, toFollowFrom: nil, why: "no source", device: Self.dongle),
            .startWait(DropAccount.wait),
        ])
        #expect(account.waitEnded() == [.cancelWait, .count(.unavailable)], "no second line")
        // A first Device1.Disconnected within the wait still gets its line, and is what is counted.
        _ = drop(&account, at: 20, source: nil)
        #expect(account.reasonHeard(.remote, address: Self.dongle, at: .seconds(20) + .milliseconds(5)) == [
            .cancelWait, .logReason(.remote, why: nil, droppedAt: .seconds(20), device: Self.dongle), .count(.remote),
        ])
    }

    @Test func aSecondDropEndsTheFirstsWait() {
        var account = DropAccount()
        _ = drop(&account, at: 10)
        let effects = drop(&account, at: 10)
        #expect(effects.prefix(3) == [
            .cancelWait, .logReason(.unavailable, why: "another drop came first", droppedAt: .seconds(10), device: Self.dongle),
            .count(.unavailable),
        ])
        #expect(effects.filter { if case .count = $0 { true } else { false } }.count == 1)
    }

    @Test func aReasonForAnotherDeviceIsNotThisDrops() {
        var account = DropAccount()
        _ = drop(&account, at: 10)
        #expect(account.reasonHeard(.remote, address: "11:22:33:44:55:66", at: .seconds(10)).isEmpty)
        #expect(account.stopping() == [
            .cancelWait,
            .logReason(.unavailable, why: "the daemon stopped before the kernel said why", droppedAt: .seconds(10), device: Self.dongle),
            .count(.unavailable),
        ])
    }
}
