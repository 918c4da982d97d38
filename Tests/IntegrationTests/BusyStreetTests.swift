import Configuration
import DBus
import Foundation
import Simulator
import TestSupport
import Testing

/// A busy street: while discovery runs, bluetoothd sends one
/// PropertiesChanged per advertisement of every device in range. Once the
/// dongle's address is known, Tether's match rules let in the dongle's
/// object alone and sample the others (`DeviceScope`): the street costs it
/// (nearly) nothing, and still shows that the controller hears the air.
@Suite struct BusyStreetTests {
    /// Tether's Device1 PropertiesChanged rules, as the bus daemon holds them.
    static func deviceRules(_ harness: DaemonHarness, on bus: Bus) async throws -> [String] {
        let name = try #require(await harness.daemonUniqueName())
        let reply = try await bus.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus.Debug.Stats", method: "GetAllMatchRules"
        )
        guard case .dictionary(_, _, let entries)? = reply.first else { return [] }
        let rules = entries.first { $0.key == .string(name) }?.value.stringArray ?? []
        return rules.filter { $0.contains("PropertiesChanged") && $0.contains("arg0='org.bluez.Device1'") }
    }

    @Test func theDonglesObjectAloneIsHeardAndTheOthersSampled() async throws {
        var options = SimulatorOptions()
        options.otherAdvertisers = 40
        options.otherAdvertisingInterval = .milliseconds(100)  // 400 reports a second
        let harness = try await DaemonHarness(simulator: options) {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
        }
        let bus = try await Bus.connect(address: harness.busDaemon.address)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let dongle = "path='/org/bluez/hci0/dev_\(DaemonHarness.address.replacingOccurrences(of: ":", with: "_"))'"
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        // Its DFU bootloader's object: the address with its last octet plus one.
        let bootloader = "path='/org/bluez/hci0/dev_AA_BB_CC_DD_EE_00'"
        // Away among the 40: the dongle's own rule and its bootloader's, and
        // the sample shut (it closes at the first other advertisement, for 10 s).
        var rules: [String] = []
        let narrowed = await eventually(timeout: .seconds(5)) {
            rules = (try? await Self.deviceRules(harness, on: bus)) ?? []
            return rules.count == 2 && rules.contains { $0.contains(dongle) } && rules.contains { $0.contains(bootloader) }
        }
        let lines = harness.logLines.all
        await harness.simulator.wake()
        let woken = ContinuousClock.now
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        let back = woken.duration(to: .now)
        await bus.close()
        await harness.stop()
        print("figure: busy street (40 advertisers, 400 reports/s): Tether's Device1 rules while away \(rules); online \(back) after the dongle advertised again")
        #expect(narrowed, "Device1 rules while away: \(rules)")
        #expect(lines.contains { $0.contains("event=away") && $0.contains("other devices are heard advertising") })
        #expect(back < .seconds(2))
    }

    /// By name, nothing bound: any device may be the dongle, so all are heard.
    @Test func aConfigByNameHearsEveryDeviceUntilItIsBound() async throws {
        var options = SimulatorOptions()
        options.otherAdvertisers = 5
        let harness = try await DaemonHarness(simulator: options) {
            $0.dongle.address = nil
            $0.dongle.namePrefix = "Nobody-Here"
        }
        let bus = try await Bus.connect(address: harness.busDaemon.address)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.searching))
        let rules = try await Self.deviceRules(harness, on: bus)
        await bus.close()
        await harness.stop()
        #expect(rules.count == 1 && rules.allSatisfy { $0.contains("path_namespace='/org/bluez'") }, "\(rules)")
    }

    /// The first link binds the dongle: from then on its object alone.
    @Test func aBoundDongleIsHeardAlone() async throws {
        var options = SimulatorOptions()
        options.otherAdvertisers = 5
        let harness = try await DaemonHarness(simulator: options) {
            $0.dongle.address = nil
            $0.dongle.namePrefix = "Tether"
        }
        let bus = try await Bus.connect(address: harness.busDaemon.address)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        var rules: [String] = []
        let narrowed = await eventually(timeout: .seconds(5)) {
            rules = (try? await Self.deviceRules(harness, on: bus)) ?? []
            return rules.contains { $0.contains("path='/org/bluez/hci0/dev_") }
        }
        await bus.close()
        await harness.stop()
        #expect(narrowed, "once bound: \(rules)")
    }
}
