import BlueZ
import DBus
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// The attack of issue 42, on the simulator: a second, unrelated client on
/// the same bus sends the daemon's unique name forged signals (unicast:
/// dbus-daemon delivers them whatever the daemon's rules say) and
/// broadcasts the same. Before the fix, a forged
/// `NameOwnerChanged("org.bluez", …, "")` made Tether log "bluetoothd went
/// away" and stop its keep-alive, and a second one naming the attacker made
/// it take the attacker's `PropertiesChanged(Value)` as readings.
@Suite(.serialized) struct ForgedBusSignalTests {
    @Test func forgedOwnerChangesAndValuesAreNotBelieved() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 20
        options.sleepAfter = .seconds(3)
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))

        let attacker = try await Bus.connect(address: harness.busDaemon.address)
        let attackerName = await attacker.uniqueName
        let tree = try await BlueZClient(bus: attacker).managedObjects()
        let device = try #require(tree.devices.first { $0.address == DaemonHarness.address })
        let tx = try #require(tree.characteristics(of: device.path).first { $0.flags.contains("notify") })
        let bluez = try #require(try await attacker.nameOwner(of: BlueZ.service))
        // The daemon's connection: the one other than the simulator's, the attacker's and the bus's.
        let victim = try #require(await harness.daemonUniqueName())

        let forged: [UInt8] = [0xEE, 0xEE, 0xEE, 0xEE, 0x66, 0x6F, 0x72, 0x67, 0x65, 0x64]
        for destination in [victim, nil] {
            // "bluetoothd went away", then "the attacker is org.bluez".
            try await attacker.emit(
                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                [.string(BlueZ.service), .string(bluez), .string("")], destination: destination
            )
            try await attacker.emit(
                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                [.string(BlueZ.service), .string(""), .string(attackerName)], destination: destination
            )
            for _ in 0..<20 {
                try await attacker.emit(
                    path: tx.path, interface: StandardInterface.properties, member: "PropertiesChanged",
                    [.string(BlueZ.gattCharacteristicInterface), .vardict(["Value": .bytes(forged)]), .strings([])],
                    destination: destination
                )
            }
            // The link is gone, says the attacker.
            try await attacker.emit(
                path: device.path, interface: StandardInterface.properties, member: "PropertiesChanged",
                [.string(BlueZ.deviceInterface), .vardict(["Connected": .boolean(false), "ServicesResolved": .boolean(false)]),
                 .strings([])],
                destination: destination
            )
        }
        _ = try await attacker.nameOwner(of: "org.freedesktop.DBus")
        // Long enough for a dongle left without keep-alives to fall asleep (3 s).
        try await Task.sleep(for: .seconds(5))
        #expect(harness.state == .online)
        await attacker.close()
        let outcome = try await harness.quiesceAndStop(settle: .milliseconds(300))

        #expect(!outcome.events.contains { $0.ev == "sleep" }, "the dongle fell asleep")
        #expect(!outcome.log.contains { $0.contains("bluetoothd went away") || $0.contains("bluetoothd left") },
                "\(outcome.log.filter { $0.contains("bluetoothd") })")
        let onDisk = outcome.onDisk
        #expect(!onDisk.contains(0xEEEE_EEEE), "a forged reading was recorded")
        let sent = Set(outcome.sent)
        let missing = sent.subtracting(onDisk)
        #expect(missing.isEmpty, "\(missing.count) of \(sent.count) readings never reached the disk")
        #expect(onDisk.count == Set(onDisk).count, "a reading was recorded twice")
        print("figure: forged signals: \(sent.count) sent, \(onDisk.count) on disk, state online throughout")
    }
}
