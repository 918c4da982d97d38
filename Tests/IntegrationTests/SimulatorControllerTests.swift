import BlueZ
import DBus
import Foundation
import Rfkill
import Simulator
import TestSupport
import Testing

/// The simulated controller under bluetoothd: its rfkill switch, served as a
/// socket that `RfkillDevice` reads and writes as it would `/dev/rfkill`,
/// and a lockup. Driven as a client would, over D-Bus and the socket.
@Suite(.serialized) struct SimulatorControllerTests {
    static let adapter = SimulatorTests.adapter
    static let device = SimulatorTests.device
    static let gatt = BlueZ.gattCharacteristicInterface

    /// Reads rfkill events until `count` came (or 3 s passed).
    func read(_ count: Int, from device: RfkillDevice) async -> [RfkillEvent] {
        var events: [RfkillEvent] = []
        _ = await eventually(timeout: .seconds(3)) {
            events += device.readEvents()
            return events.count >= count
        }
        return events
    }

    func powered(_ f: SimulatorFixture) async throws -> Bool? {
        try await f.managedObjects()[Self.adapter]?[BlueZ.adapterInterface]?["Powered"]?.bool
    }

    func setPowered(_ f: SimulatorFixture, _ on: Bool) async throws {
        try await f.client.setRemoteProperty(
            destination: BlueZ.service, path: Self.adapter, interface: BlueZ.adapterInterface, name: "Powered",
            value: .boolean(on)
        )
    }

    func withRfkill(_ body: (SimulatorFixture, RfkillSource) async throws -> Void) async throws {
        let directory = try TemporaryDirectory("sim-rfkill")
        defer { directory.remove() }
        try await withSimulator({ $0.rfkillDirectory = directory.url.path }) { f in
            try await body(f, try #require(f.simulator.rfkill))
        }
    }

    /// Two other advertisers, each reported within a few scan ticks.
    static func twoStrangers(_ options: inout SimulatorOptions) {
        options.otherAdvertisers = 2
        options.advertisingInterval = .milliseconds(30)
        options.otherAdvertisingInterval = .milliseconds(60)
    }

    static func change(_ index: UInt32 = 0, soft: Bool, hard: Bool) -> RfkillEvent {
        RfkillEvent(index: index, type: RfkillEvent.bluetoothType, operation: .change, softBlocked: soft, hardBlocked: hard)
    }

    // MARK: rfkill

    @Test func aSoftBlockPowersTheAdapterOffAndAClientsUnblockPowersItOnAgain() async throws {
        try await withRfkill { f, source in
            #expect(RfkillDevice.name(ofSwitch: 0, sysfs: source.sysfs) == "hci0")
            let device = try RfkillDevice.openEvents(path: source.device).get()
            defer { device.close() }
            #expect(device.isSocket)
            // What an open of /dev/rfkill reads first.
            #expect(await read(1, from: device) == [
                RfkillEvent(index: 0, type: RfkillEvent.bluetoothType, operation: .add, softBlocked: false, hardBlocked: false)
            ])
            try await f.connectAndResolve()
            let signals = try await f.record()
            await f.simulator.setRfkill(soft: true, hard: false)
            #expect(await read(1, from: device) == [Self.change(soft: true, hard: false)])
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Powered"] == .boolean(false) }
            #expect(await signals.messages.contains { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(false) })
            // The kernel refuses to open a blocked controller.
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "Blocked through rfkill")) {
                try await setPowered(f, true)
            }
            // The daemon's rfkill-unblock: a write of RFKILL_OP_CHANGE to the same path.
            try RfkillDevice.setSoftBlock(index: 0, blocked: false, path: source.device).get()
            #expect(await read(1, from: device) == [Self.change(soft: false, hard: false)])
            // bluetoothd restores power on the unblock.
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Powered"] == .boolean(true) }
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            let rfkill = await f.simulator.events.filter { $0.ev == "rfkill" }
            #expect(rfkill.map(\.reason) == ["soft", "none"])
            #expect(rfkill.map(\.type) == ["control", "client"])
        }
    }

    @Test func aClientsUnblockUnderAHardBlockClearsOnlyTheSoftOne() async throws {
        try await withRfkill { f, source in
            let device = try RfkillDevice.openEvents(path: source.device).get()
            defer { device.close() }
            _ = await read(1, from: device)
            await f.simulator.setRfkill(soft: true, hard: true)
            #expect(await read(1, from: device) == [Self.change(soft: true, hard: true)])
            #expect(try await powered(f) == false)
            try RfkillDevice.setSoftBlock(index: 0, blocked: false, path: source.device).get()
            #expect(await read(1, from: device) == [Self.change(soft: false, hard: true)])
            try await Task.sleep(for: .milliseconds(200))
            #expect(try await powered(f) == false, "the hard block keeps the controller off")
            // The hardware switch lifts: bluetoothd powers the adapter on.
            _ = try await f.client.call(
                destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
                method: "Rfkill", [.string("none")]
            )
            #expect(await read(1, from: device) == [Self.change(soft: false, hard: false)])
            #expect(await eventually(timeout: .seconds(3)) { (try? await powered(f)) == true })
            await #expect(throws: DBusError.self) {
                try await f.client.call(
                    destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
                    method: "Rfkill", [.string("airplane")]
                )
            }
        }
    }

    @Test func aControllerThatComesBackRegistersANewSwitch() async throws {
        try await withRfkill { f, source in
            let device = try RfkillDevice.openEvents(path: source.device).get()
            defer { device.close() }
            _ = await read(1, from: device)
            await f.simulator.removeAdapter()
            #expect(await read(1, from: device) == [
                RfkillEvent(index: 0, type: RfkillEvent.bluetoothType, operation: .delete, softBlocked: false, hardBlocked: false)
            ])
            #expect(RfkillDevice.name(ofSwitch: 0, sysfs: source.sysfs) == nil)
            try await f.simulator.addAdapter(name: "hci1", address: SimulatorOptions().adapterAddress)
            #expect(await read(1, from: device) == [
                RfkillEvent(index: 1, type: RfkillEvent.bluetoothType, operation: .add, softBlocked: false, hardBlocked: false)
            ])
            #expect(RfkillDevice.name(ofSwitch: 1, sysfs: source.sysfs) == "hci1")
            // A reader that connects now is told of the new switch alone.
            let late = try RfkillDevice.openEvents(path: source.device).get()
            defer { late.close() }
            #expect(await read(1, from: late).map(\.index) == [1])
        }
    }

    @Test func aReaderSeesTheSocketCloseWhenTheSimulatorStops() async throws {
        let directory = try TemporaryDirectory("sim-rfkill")
        defer { directory.remove() }
        let fixture = try await SimulatorFixture { $0.rfkillDirectory = directory.url.path }
        let source = try #require(fixture.simulator.rfkill)
        let device = try RfkillDevice.openEvents(path: source.device).get()
        defer { device.close() }
        _ = await read(1, from: device)
        await fixture.close()
        #expect(await eventually(timeout: .seconds(3)) {
            _ = device.readEvents()
            return device.failure == .closed(path: source.device)
        })
    }

    // MARK: Lockup

    @Test func aLockedUpControllerStaysPoweredAndConnectedButAnswersNothing() async throws {
        try await withSimulator({
            $0.hciCommandTimeout = .milliseconds(300)
            $0.attTimeout = .milliseconds(600)
        }) { f in
            try await f.connectAndResolve()
            try await f.call(SimulatorTests.tx, Self.gatt, "StartNotify")
            #expect(await eventually(timeout: .seconds(3)) { await f.simulator.lastSequence > 0 })
            await f.simulator.setLockup(true, clearsOnPowerCycle: true)
            // bluetoothd notices nothing; the dongle lost the link and advertises.
            let objects = try await f.managedObjects()
            #expect(objects[Self.adapter]?[BlueZ.adapterInterface]?["Powered"] == .boolean(true))
            #expect(objects[Self.device]?[BlueZ.deviceInterface]?["Connected"] == .boolean(true))
            #expect(await f.simulator.state == .advertising)
            let sequence = await f.simulator.lastSequence
            try await Task.sleep(for: .milliseconds(400))
            #expect(await f.simulator.lastSequence == sequence, "no notification after the lockup")

            // The kernel's command times out: bluetoothd 5.66 answers busy.
            var start = ContinuousClock.now
            #expect(await f.callError(Self.adapter, BlueZ.adapterInterface, "StartDiscovery") == DBusError.remote(
                name: BlueZ.ErrorName.inProgress, message: "Operation already in progress"
            ))
            #expect(start.duration(to: .now) >= .milliseconds(300))
            // A write request waits for the ATT timeout; a write command is taken.
            start = .now
            #expect(await f.callError(SimulatorTests.rx, Self.gatt, "WriteValue", [.bytes([1]), .vardict(["type": .string("request")])])
                == DBusError.remote(name: BlueZ.ErrorName.failed, message: "Operation failed"))
            #expect(start.duration(to: .now) >= .milliseconds(600))
            try await f.call(SimulatorTests.rx, Self.gatt, "WriteValue", [.bytes([1]), .vardict(["type": .string("command")])])
            // A Connect on the link bluetoothd believes in is answered from its state.
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")

            // Disconnect times out in the kernel: bluetoothd lets the link go
            // (Connected=false) while the kernel keeps its connection, so a
            // Connect fails at once (bluetoothd 5.66 on kernel 6.1, make e2e).
            let signals = try await f.record()
            start = .now
            try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")
            #expect(start.duration(to: .now) >= .milliseconds(300))
            #expect(await signals.messages.contains { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(false) })
            start = .now
            #expect(await f.callError(Self.device, BlueZ.deviceInterface, "Connect")
                == DBusError.remote(name: BlueZ.ErrorName.failed, message: "Input/output error"))
            #expect(start.duration(to: .now) < .milliseconds(300), "the kernel's stale connection fails it at once")
            try await setPowered(f, false)
            // Powered on again: the HCI Reset of opening it ends the lockup.
            try await setPowered(f, true)
            try await f.connectAndResolve()
            #expect(await eventually(timeout: .seconds(3)) { await f.simulator.lastSequence > sequence })
            let lockups = await f.simulator.events.filter { $0.ev == "controller-lockup" }
            #expect(lockups.map(\.on) == [true, false])
            #expect(lockups.last?.reason == "power-cycle")
        }
    }

    @Test func aControllerThatLocksUpWhileDiscoveringPassesNoAdvertAndSaysNothing() async throws {
        try await withSimulator({ $0.known = false; $0.advertisingInterval = .milliseconds(30) }) { f in
            let seen = try await f.record()
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            try await seen.waitUntil(timeout: .seconds(3)) { log in
                await log.messages.filter { $0.propertiesChanged(on: Self.device)?["RSSI"] != nil }.count >= 2
            }
            await f.simulator.setLockup(true, clearsOnPowerCycle: true)
            let during = try await f.record()
            try await Task.sleep(for: .milliseconds(400))
            let messages = await during.messages
            #expect(!messages.contains { $0.propertiesChanged(on: Self.device)?["RSSI"] != nil }, "no advert through a wedged controller")
            #expect(!messages.contains { $0.propertiesChanged(on: Self.adapter)?["Discovering"] != nil }, "bluetoothd says nothing")
            #expect(try await f.managedObjects()[Self.adapter]?[BlueZ.adapterInterface]?["Discovering"] == .boolean(true))
            // Answering again, it passes the adverts up again.
            await f.simulator.setLockup(false, clearsOnPowerCycle: true)
            try await during.waitUntil(timeout: .seconds(3)) { log in
                await log.messages.contains { $0.propertiesChanged(on: Self.device)?["RSSI"] != nil }
            }
        }
    }

    @Test func aLockupAPowerCycleCannotClearLeavesTheAdapterOffUntilItEnds() async throws {
        try await withSimulator({ $0.hciCommandTimeout = .milliseconds(200) }) { f in
            await f.simulator.setLockup(true, clearsOnPowerCycle: false)
            #expect(await f.callError(Self.device, BlueZ.deviceInterface, "Connect")
                == DBusError.remote(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal))
            try await setPowered(f, false)
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "Timeout")) {
                try await setPowered(f, true)
            }
            #expect(try await powered(f) == false)
            _ = try await f.client.call(
                destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
                method: "Lockup", [.boolean(false), .boolean(false)]
            )
            try await setPowered(f, true)
            try await f.connectAndResolve()
        }
    }

    // MARK: A controller that leaves

    /// bluetoothd removes every device object under an adapter that goes,
    /// strangers' too; under the next one discovery makes them anew. (The
    /// simulator kept the bootloader's object as made, so after the
    /// controller came back as hci1 it changed the RSSI of a path that no
    /// longer existed and DfuTarg was never heard: a soak's firmware update
    /// was escalated as a controller fault.)
    @Test func strangersObjectsLeaveWithTheAdapterAndAreMadeAgainUnderTheNextOne() async throws {
        try await withSimulator(Self.twoStrangers) { f in
            await f.simulator.setBootloader(true)
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            func strangers(under adapter: String) async throws -> Set<String> {
                let objects = try await f.managedObjects()
                return Set(objects.compactMap { path, interfaces in
                    guard path.rawValue.hasPrefix(adapter + "/dev_"), let device = interfaces[BlueZ.deviceInterface],
                          case .string(let name) = device["Name"], name != SimulatorOptions().name
                    else { return nil }
                    return name
                })
            }
            #expect(await eventually(timeout: .seconds(3)) {
                (try? await strangers(under: "/org/bluez/hci0")) == ["DfuTarg", "Other-0", "Other-1"]
            })
            await f.simulator.removeAdapter()
            #expect(try await f.managedObjects().keys.allSatisfy { !$0.rawValue.hasPrefix("/org/bluez/hci0") })
            try await f.simulator.addAdapter(name: "hci1", address: SimulatorOptions().adapterAddress)
            try await f.call("/org/bluez/hci1", BlueZ.adapterInterface, "StartDiscovery")
            #expect(await eventually(timeout: .seconds(3)) {
                (try? await strangers(under: "/org/bluez/hci1")) == ["DfuTarg", "Other-0", "Other-1"]
            })
        }
    }

    /// The strangers' objects live in bluetoothd's memory: a clean stop
    /// removes them with the rest (InterfacesRemoved), and the next
    /// bluetoothd's discovery makes them anew. (The simulator tied them to
    /// the connection's address, `ObjectIdentifier`: a new bluetoothd whose
    /// connection the allocator put where the old one had been was taken
    /// for the old one, so it changed the RSSI of objects it never made,
    /// and `make dst` gave a seed another life when seeds ran side by side.)
    @Test func strangersObjectsGoWithBluetoothdAndTheNextOneMakesThemAnew() async throws {
        try await withSimulator(Self.twoStrangers) { f in
            // Other-0 and Other-1 (the simulator's addresses for strangers).
            let strangers: Set<ObjectPath> = ["/org/bluez/hci0/dev_0A_00_00_00_00_00", "/org/bluez/hci0/dev_0A_00_00_00_00_01"]
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            #expect(await eventually(timeout: .seconds(3)) {
                (try? await f.managedObjects().keys).map { strangers.isSubset(of: Set($0)) } ?? false
            })
            let signals = try await f.record()
            await f.simulator.restart(after: .milliseconds(50))
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.adapter }
            let removed = Set(await signals.messages.filter { $0.member == "InterfacesRemoved" }.compactMap { $0.body.first?.objectPath })
            #expect(strangers.isSubset(of: removed))
            #expect(await eventually(timeout: .seconds(3)) { await f.simulator.bluezUniqueName != nil })
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            _ = try await signals.wait { message in
                message.member == "InterfacesAdded" && message.body.first?.objectPath.map { strangers.contains($0) } == true
            }
            #expect(await eventually(timeout: .seconds(3)) {
                (try? await f.managedObjects().keys).map { strangers.isSubset(of: Set($0)) } ?? false
            })
        }
    }
}
