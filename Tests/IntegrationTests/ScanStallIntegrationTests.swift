import Configuration
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// BlueZ's LE scan stops delivering advertisements while `Discovering`
/// stays true (the simulator's `StallScan`): where others were heard,
/// Tether notices the silence, starts discovery again, then takes the
/// controller steps, and finds the dongle when it advertises.
@Suite(.serialized) struct ScanStallIntegrationTests {
    /// Above the 10 s at which other advertisers are told to the supervisor.
    static let stallAfter: Duration = .seconds(15)

    func harness(known: Bool) async throws -> DaemonHarness {
        var options = SimulatorOptions()
        options.otherAdvertisers = 3
        options.known = known
        return try await DaemonHarness(simulator: options) {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
            $0.reconnect.scanStallAfter = Self.stallAfter
        }
    }

    static func stallEnds(_ harness: DaemonHarness) -> [SimulatorEvent] {
        harness.events().filter { $0.ev == "scan-stall" && $0.on == false }
    }

    /// Away, a stall that a new scan enable lifts: discovery started again
    /// ends it, and no controller step is taken.
    @Test func aStallWhileAwayIsLiftedByStartingDiscoveryAgain() async throws {
        let harness = try await harness(known: true)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        let stalled = ContinuousClock.now
        await harness.simulator.stallScan(.untilRestart)
        #expect(await eventually(timeout: .seconds(40)) { !Self.stallEnds(harness).isEmpty })
        print("figure: a restart-type stall while away lifted \(FieldFaultTests.seconds(stalled, .now)) s after it began (scan_stall_after \(Self.stallAfter))")
        #expect(Self.stallEnds(harness).first?.reason == "discovery-restarted")
        let woke = ContinuousClock.now
        await harness.simulator.wake()
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        print("figure: online \(FieldFaultTests.seconds(woke, .now)) s after the dongle advertised")
        let lines = harness.logLines.all
        #expect(lines.filter { $0.contains("event=scan-stalled") }.count == 1)
        #expect(!lines.contains { $0.contains("→ escalating") })
        await harness.stop()
    }

    /// Searching (started while the vehicle was parked: bluetoothd does not
    /// know the dongle), a stall only a controller reset lifts: discovery
    /// started again does not help, the power cycle does.
    @Test func aStallWhileSearchingThatOnlyAResetLiftsTakesThePowerCycle() async throws {
        let harness = try await harness(known: false)
        await harness.simulator.sleep()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.searching, within: .seconds(10)))
        // Others heard first: this place is busy.
        #expect(await eventually(timeout: .seconds(5)) { harness.logLines.all.contains { $0.contains("discovering") } })
        try await Task.sleep(for: .seconds(2))
        let stalled = ContinuousClock.now
        await harness.simulator.stallScan(.untilReset)
        #expect(await eventually(timeout: .seconds(60)) { !Self.stallEnds(harness).isEmpty })
        print("figure: a reset-type stall while searching lifted \(FieldFaultTests.seconds(stalled, .now)) s after it began (scan_stall_after \(Self.stallAfter))")
        #expect(Self.stallEnds(harness).first?.reason == "power-cycle")
        let lines = harness.logLines.all
        #expect(lines.contains { $0.contains("event=scan-stalled") && $0.contains("restarting=true") })
        #expect(lines.contains { $0.contains("event=scan-stalled") && $0.contains("restarting=false") })
        #expect(lines.contains { $0.contains("→ escalating") && $0.contains("the scan stalled") })
        let woke = ContinuousClock.now
        await harness.simulator.wake()
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        print("figure: online \(FieldFaultTests.seconds(woke, .now)) s after the dongle advertised")
        await harness.stop()
    }
}
