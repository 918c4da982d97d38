import Configuration
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

@testable import TetherDaemon

/// The dongle's address moves without it being another device: pairing
/// shows its identity address, and its DFU bootloader advertises at the
/// address plus one. Tether follows the first and never connects to the
/// second.
@Suite(.serialized) struct DongleIdentityTests {
    static let identity = "C4:00:00:00:12:34"
    static let bootloader = "AA:BB:CC:DD:EE:00"

    @Test func aBindingFollowsTheIdentityAddressPairingShows() async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        options.identityAddress = Self.identity
        let harness = try await DaemonHarness(simulator: options) {
            $0.dongle.address = nil
            $0.dongle.namePrefix = "Tether"
            $0.dongle.pairing = .justWorks
        }
        // Bound on an earlier link, before the dongle was paired.
        let file = DongleBinding.path(inReadingsDirectory: harness.readingsDirectory)
        try FileManager.default.createDirectory(atPath: harness.readingsDirectory, withIntermediateDirectories: true)
        try (DaemonHarness.address + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(await eventually(timeout: .seconds(2)) { (try? String(contentsOfFile: file, encoding: .utf8)) == Self.identity + "\n" })
        #expect(harness.service?.status.boundDongle == Self.identity)
        #expect(harness.service?.status.device == Self.identity)
        #expect(harness.logLines.all.contains { $0.contains("now shows its public identity address \(Self.identity)") && $0.contains("the binding follows it") })
        // Online all along: the move is not a lost dongle.
        #expect(harness.logLines.all.filter { $0.contains("event=disconnected") || $0.contains("link lost") }.isEmpty)

        // Restarted, Tether finds the dongle by its identity at once.
        await harness.stopDaemon()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(harness.service?.status.device == Self.identity)
        await harness.stop()
    }

    @Test func aConfiguredAddressIsFollowedAndTheOperatorToldToChangeIt() async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        options.identityAddress = Self.identity
        let harness = try await DaemonHarness(simulator: options) { $0.dongle.pairing = .justWorks }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(await eventually(timeout: .seconds(2)) { harness.service?.status.device == Self.identity })
        let warnings = harness.logLines.all.filter { $0.contains("set dongle.address = \"\(Self.identity)\"") }
        #expect(warnings.count == 1)
        // A drop: Tether comes back to the same object under its new address.
        await harness.simulator.dropLink(reason: "test")
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        #expect(harness.service?.status.device == Self.identity)
        await harness.stop()
    }

    @Test func theDFUBootloaderIsSaidOnceNeverConnectedToAndTheDongleComesBack() async throws {
        var options = SimulatorOptions()
        options.otherAdvertisers = 2
        let harness = try await DaemonHarness(simulator: options) {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))

        await harness.simulator.setBootloader(true)
        #expect(await eventually(timeout: .seconds(15)) { harness.service?.status.bootloader == Self.bootloader })
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        let status = harness.service?.status
        #expect(status?.summary().contains("in its DFU bootloader (DfuTarg at \(Self.bootloader))") == true)
        try await Task.sleep(for: .seconds(2))

        let woke = ContinuousClock.now
        await harness.simulator.setBootloader(false)
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        print("figure: back from the DFU bootloader, online \(FieldFaultTests.seconds(woke, .now)) s after the dongle advertised")
        #expect(await eventually(timeout: .seconds(2)) { harness.service?.status.bootloader == nil })
        let lines = harness.logLines.all
        #expect(lines.filter { $0.contains("is in its DFU bootloader") }.count == 1)
        #expect(lines.filter { $0.contains("is back from its DFU bootloader") }.count == 1)
        #expect(harness.events().filter { $0.ev == "connect-request" && $0.reason == "bootloader" }.isEmpty)
        #expect(!lines.contains { $0.contains("→ escalating") })
        await harness.stop()
    }
}
