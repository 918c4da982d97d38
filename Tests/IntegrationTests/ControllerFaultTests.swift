import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// The daemon against the simulator's controller faults: rfkill blocks on
/// the simulator's own rfkill socket (which powers the adapter off and on as
/// kernel and bluetoothd do, unlike the FIFO of `RfkillBlockTests`), and a
/// controller lockup that the `power-cycle` step clears.
@Suite(.serialized) struct ControllerFaultTests {
    @Test func aSoftBlockIsClearedByTheDaemonThroughTheSimulatorsRfkill() async throws {
        let harness = try await DaemonHarness(simulatedRfkill: true) { $0.reconnect.escalate = [.rfkillUnblock] }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let blocked = ContinuousClock.now
        let before = try harness.sequencesOnDisk().count
        await harness.simulator.setRfkill(soft: true, hard: false)
        #expect(await eventually(timeout: .seconds(10)) {
            harness.state == .online && ((try? harness.sequencesOnDisk().count) ?? 0) > before
                && harness.events().contains { $0.ev == "rfkill" && $0.type == "client" }
        })
        print("figure: soft block to readings again, the daemon unblocking: \(blocked.duration(to: .now))")
        let rfkill = harness.events().filter { $0.ev == "rfkill" }
        #expect(rfkill.map(\.reason) == ["soft", "none"])
        #expect(rfkill.map(\.type) == ["control", "client"], "the daemon's own write cleared it")
        let power = harness.events().filter { $0.ev == "power" }
        #expect(power.map(\.on) == [false, true])
        #expect(power.map(\.reason) == ["rfkill", "rfkill-unblock"])
        let lines = harness.logLines.all
        #expect(lines.contains { $0.contains("rfkill-unblock: done") }, "\(lines)")
        let outcome = try await harness.quiesceAndStop()
        #expect(Set(outcome.sent).subtracting(outcome.onDisk).isEmpty, "every notification sent is on disk")
    }

    @Test func aHardBlockIsWaitedOutWithoutAWriteAndTheAdapterComesBackByItself() async throws {
        let harness = try await DaemonHarness(simulatedRfkill: true) { $0.reconnect.escalate = [.rfkillUnblock] }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.setRfkill(soft: false, hard: true)
        #expect(await harness.waitForState(.waitingForAdapter))
        try await Task.sleep(for: .seconds(2))
        #expect(harness.state == .waitingForAdapter)
        #expect(harness.service?.status.adapterProblem?.contains("blocked by a hardware switch") == true)
        let during = harness.events()
        #expect(!during.contains { $0.ev == "rfkill" && $0.type == "client" }, "no unblock under a hard block")
        let lifted = ContinuousClock.now
        await harness.simulator.setRfkill(soft: false, hard: false)
        #expect(await harness.waitForState(.online))
        print("figure: hard block lifted to online: \(lifted.duration(to: .now))")
        #expect(!harness.logLines.all.contains { $0.contains("escalating") })
        await harness.stop()
    }

    /// The Raspberry Pi's onboard radio, one boot in ten: the controller
    /// comes up on its chip's default address, and bthelper sets the real
    /// one moments later (bluetoothd drops the adapter and lists it again).
    /// The daemon does not use the placeholder, says why, and goes online
    /// once the real address is there.
    @Test func aControllerOnAPlaceholderAddressIsWaitedForUntilItHasItsOwn() async throws {
        var options = SimulatorOptions()
        let real = options.adapterAddress
        options.adapterAddress = "AA:AA:AA:AA:AA:AA"
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.waitingForAdapter))
        #expect(await eventually(timeout: .seconds(5)) {
            harness.service?.status.adapterProblem?.contains("hci0 is on the placeholder address AA:AA:AA:AA:AA:AA (BCM43430A1's default)") == true
        }, "\(String(describing: harness.service?.status.adapterProblem))")
        try await Task.sleep(for: .seconds(1))
        #expect(harness.state == .waitingForAdapter)
        #expect(!harness.events().contains { $0.ev == "connect-request" || $0.ev == "discovery-start" }, "nothing through the placeholder")
        let set = ContinuousClock.now
        await harness.simulator.removeAdapter()
        try await harness.simulator.addAdapter(name: "hci0", address: real)
        #expect(await harness.waitForState(.online))
        print("figure: real address set to online: \(set.duration(to: .now))")
        #expect(harness.service?.status.adapterProblem == nil)
        let lines = harness.logLines.all
        #expect(lines.filter { $0.contains("is on the placeholder address") }.count == 1, "said once: \(lines)")
        #expect(lines.contains { $0.contains("using hci0 (\(real))") }, "\(lines)")
        await harness.stop()
    }

    @Test func aLockupIsDetectedAndClearedByThePowerCycleStep() async throws {
        var options = SimulatorOptions()
        options.hciCommandTimeout = .milliseconds(500)
        options.attTimeout = .seconds(3)
        let harness = try await DaemonHarness(simulator: options) { config in
            config.dongle.silenceLimit = .after(.seconds(2))
            config.reconnect.window = .seconds(8)
            config.reconnect.windowAttempts = 3
            config.reconnect.escalate = [.powerCycle]
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let before = try harness.sequencesOnDisk().count
        let locked = ContinuousClock.now
        await harness.simulator.setLockup(true, clearsOnPowerCycle: true)
        #expect(await eventually(timeout: .seconds(40)) {
            !(await harness.simulator.isLockedUp) && harness.state == .online
                && ((try? harness.sequencesOnDisk().count) ?? 0) > before
        })
        print("figure: lockup to readings again through power-cycle: \(locked.duration(to: .now))")
        let lockups = harness.events().filter { $0.ev == "controller-lockup" }
        #expect(lockups.map(\.on) == [true, false])
        #expect(lockups.last?.reason == "power-cycle")
        let lines = harness.logLines.all
        #expect(lines.contains { $0.contains("escalating: power-cycle") }, "\(lines)")
        let outcome = try await harness.quiesceAndStop()
        #expect(Set(outcome.sent).subtracting(outcome.onDisk).isEmpty, "every notification sent is on disk")
    }
}
