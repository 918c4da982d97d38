import Configuration
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// bluetoothd 5.66 serves a Connect while the management command of an
/// earlier StopDiscovery is still queued: the kernel stops the scan for the
/// connect, the command is rejected, and bluetoothd keeps `Discovering`
/// true with no scan running until the adapter is powered off (`make e2e`'s
/// parked; the simulator does the same). Tether sends nothing while a
/// StopDiscovery is unanswered, so a dongle that discovery found and Tether
/// connected is heard again after its next absence.
@Suite(.serialized) struct DiscoveryStopOrderTests {
    @Test func aConnectAfterDiscoveryLeavesTheNextAbsenceHearing() async throws {
        var options = SimulatorOptions()
        options.known = false  // searching first: discovery, then StopDiscovery and Connect
        options.otherAdvertisers = 3
        let harness = try await DaemonHarness(simulator: options) {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = []
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        let woke = ContinuousClock.now
        await harness.simulator.wake()
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        print("figure: online \(FieldFaultTests.seconds(woke, .now)) s after the dongle advertised again (found by discovery first)")
        let rejected = harness.events().filter { $0.ev == "scan-stall" && $0.reason == "stop-discovery-rejected" }
        #expect(rejected.isEmpty, "a Connect overtook a StopDiscovery: \(rejected.count) stuck scans")
        await harness.stop()
    }
}
