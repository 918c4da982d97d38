import Configuration
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

@testable import TetherDaemon

/// A config for a whole fleet finds the dongle by name; the gateway binds to
/// the first that comes online and stays with it, with an identical dongle
/// of another vehicle nearby, across an absence and a restart.
@Suite(.serialized) struct DongleBindingTests {
    static let twin = "AA:BB:CC:DD:EE:00"

    func fleetHarness() async throws -> DaemonHarness {
        var options = SimulatorOptions()
        options.twinAddress = Self.twin
        options.otherAdvertisers = 3
        return try await DaemonHarness(simulator: options) {
            $0.dongle.address = nil
            $0.dongle.namePrefix = "Tether"
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
        }
    }

    @Test func theFirstDongleOnlineIsBoundAndAnIdenticalOneNearbyIsNeverTried() async throws {
        let harness = try await fleetHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let file = DongleBinding.path(inReadingsDirectory: harness.readingsDirectory)
        // Bound as the online report is carried out, just after the state is published.
        #expect(await eventually(timeout: .seconds(2)) { (try? String(contentsOfFile: file, encoding: .utf8)) == DaemonHarness.address + "\n" })
        #expect(await eventually(timeout: .seconds(2)) { harness.service?.status.boundDongle == DaemonHarness.address })

        // Parked: discovery hears the twin, stronger, and the dongle not.
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        try await Task.sleep(for: .seconds(3))
        await harness.simulator.wake()
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        let lines = harness.logLines.all
        let twinConnects = harness.events().filter { $0.ev == "connect-request" && $0.reason == "twin" }.count
        #expect(twinConnects == 0)
        #expect(lines.filter { $0.contains("\(Self.twin)") && $0.contains("also matches") }.count == 1)
        #expect(harness.service?.status.device == DaemonHarness.address)

        // A restart keeps the binding.
        await harness.stopDaemon()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(harness.logLines.all.contains { $0.contains("bound to the dongle \(DaemonHarness.address) (stored in") })
        await harness.stop()
    }

    @Test func rebindForgetsTheBindingAndBindsTheNextDongleOnline() async throws {
        let harness = try await fleetHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let file = DongleBinding.path(inReadingsDirectory: harness.readingsDirectory)
        guard let service = harness.service else { return }
        let outcome = await service.rebind(waitingUpTo: .seconds(5))
        guard case .forgotten(let was, _) = outcome else {
            Issue.record("rebind: \(outcome)")
            return
        }
        #expect(was == DaemonHarness.address)
        #expect(harness.logLines.all.contains { $0.contains("the binding to \(DaemonHarness.address) is forgotten") })
        // The reconnect found the dongle again (the twin takes no connection) and bound it anew.
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        #expect(await eventually(timeout: .seconds(5)) { (try? String(contentsOfFile: file, encoding: .utf8)) == DaemonHarness.address + "\n" })
        await harness.stop()
    }

    @Test func aConfigWithAnAddressBindsNothing() async throws {
        let harness = try await DaemonHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(!FileManager.default.fileExists(atPath: DongleBinding.path(inReadingsDirectory: harness.readingsDirectory)))
        let outcome = await harness.service?.rebind(waitingUpTo: .seconds(1))
        #expect(outcome == .fixedByConfig(DaemonHarness.address))
        await harness.stop()
    }

    @Test func anUnreadableBindingIsSaidAndTetherBindsAnew() async throws {
        let harness = try await fleetHarness()
        let file = DongleBinding.path(inReadingsDirectory: harness.readingsDirectory)
        try FileManager.default.createDirectory(atPath: harness.readingsDirectory, withIntermediateDirectories: true)
        try "not an address\n".write(toFile: file, atomically: true, encoding: .utf8)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(harness.logLines.all.contains { $0.contains("event=dongle-binding-unreadable") && $0.contains("not a Bluetooth address") })
        #expect(await eventually(timeout: .seconds(2)) { (try? String(contentsOfFile: file, encoding: .utf8)) == DaemonHarness.address + "\n" })
        await harness.stop()
    }
}
