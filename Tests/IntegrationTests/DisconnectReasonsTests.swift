import Testing
@testable import TetherDaemon

/// Reasons heard from the kernel or bluetoothd are paired with the drop they
/// explain, and never invented.
@Suite struct DisconnectReasonsTests {
    @Test func codesAndNamesMapToTheLabels() {
        #expect((0...6).map { DisconnectReasons.Reason(managementCode: UInt8($0)).rawValue } == [
            "unspecified", "connection-timeout", "local", "remote", "authentication-failure", "suspend", "unspecified",
        ])
        #expect(DisconnectReasons.Reason(bluezReason: "org.bluez.Reason.Timeout") == .connectionTimeout)
        #expect(DisconnectReasons.Reason(bluezReason: "org.bluez.Reason.Remote") == .remote)
        #expect(DisconnectReasons.Reason(bluezReason: "org.bluez.Reason.Local") == .local)
        #expect(DisconnectReasons.Reason(bluezReason: "org.bluez.Reason.Unknown") == .unspecified)
    }

    @Test func aReasonIsTakenOnceForItsDeviceAndOnlyWhileFresh() {
        var reasons = DisconnectReasons()
        reasons.heard(.remote, address: "aa:bb:cc:dd:ee:ff", at: .seconds(10))
        reasons.heard(.local, address: "11:22:33:44:55:66", at: .seconds(10))
        #expect(reasons.take(for: "AA:BB:CC:DD:EE:FF", near: .seconds(11)) == .remote)
        #expect(reasons.take(for: "AA:BB:CC:DD:EE:FF", near: .seconds(11)) == nil)
        reasons.heard(.connectionTimeout, address: "AA:BB:CC:DD:EE:FF", at: .seconds(20))
        #expect(reasons.take(for: "AA:BB:CC:DD:EE:FF", near: .seconds(23)) == nil, "stale: 3 s old")
    }
}
