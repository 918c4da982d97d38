import BlueZ
import DBus
import Foundation
import Simulator
import TestSupport
import Testing

/// Drives the simulated bluetoothd the way a BlueZ client would: over D-Bus,
/// from a client `Bus` on a private dbus-daemon started per test.
@Suite(.serialized) struct SimulatorTests {
    static let device: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"
    static let adapter: ObjectPath = "/org/bluez/hci0"
    static let nusService: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a"
    static let rx: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000b"
    static let tx: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000d"
    static let txCCC: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000d/desc000f"
    static let batteryService: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010"
    static let battery: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010/char0011"
    static let batteryCCC: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010/char0011/desc0013"
    static let gattPaths: [ObjectPath] = [nusService, rx, tx, txCCC, batteryService, battery, batteryCCC]

    // MARK: Object tree and Connect

    @Test func managedObjectsShowAdapterAndDeviceButNoGattBeforeConnect() async throws {
        try await withSimulator { f in
            let objects = try await f.managedObjects()
            #expect(Set(objects.keys) == ["/org/bluez", Self.adapter, Self.device])
            let adapter = try #require(objects[Self.adapter]?[BlueZ.adapterInterface])
            #expect(adapter["Powered"] == .boolean(true))
            #expect(adapter["Discovering"] == .boolean(false))
            #expect(adapter["AddressType"] == .string("public"))
            #expect(adapter["Roles"]?.stringArray?.contains("central") == true)
            let device = try #require(objects[Self.device]?[BlueZ.deviceInterface])
            #expect(device["Address"] == .string("AA:BB:CC:DD:EE:FF"))
            #expect(device["AddressType"] == .string("random"))
            #expect(device["Connected"] == .boolean(false))
            #expect(device["ServicesResolved"] == .boolean(false))
            #expect(device["Paired"] == .boolean(false))
            #expect(device["Adapter"] == .objectPath(Self.adapter))
            #expect(device["RSSI"] == nil, "RSSI exists only while discovery sees the device")
            #expect(device["UUIDs"]?.stringArray?.contains("6e400001-b5a3-f393-e0a9-e50e24dcca9e") == true)
            let manufacturer = try #require(device["ManufacturerData"]?.dictionaryEntries?.first)
            #expect(manufacturer.key == .uint16(0x0059))
            #expect(manufacturer.value.bytes?.isEmpty == false)
            // The standard interfaces are listed too, as bluetoothd lists them.
            #expect(objects[Self.device]?[StandardInterface.properties] != nil)
        }
    }

    @Test func connectAnnouncesConnectedBeforeTheReplyAndGattAfterIt() async throws {
        try await withSimulator { f in
            let signals = try await f.record()
            let reply = try await f.client.callMessage(
                destination: BlueZ.service, path: Self.device, interface: BlueZ.deviceInterface, method: "Connect"
            )
            let resolved = try await signals.wait { $0.propertiesChanged(on: Self.device)?["ServicesResolved"] == .boolean(true) }
            let all = await signals.messages
            let connected = try #require(all.first { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(true) })
            // Serials count up per sending connection: they prove the send order.
            #expect(connected.serial < reply.serial, "Connected=true must precede the Connect reply")
            let added = all.filter { $0.member == "InterfacesAdded" }
            #expect(added.compactMap { $0.body.first?.objectPath } == Self.gattPaths, "services, chars, descriptors in handle order")
            #expect(added.allSatisfy { $0.serial > reply.serial && $0.serial < resolved.serial })
            #expect(added.allSatisfy { $0.path == .root })

            let objects = try await f.managedObjects()
            let tx = try #require(objects[Self.tx]?[BlueZ.gattCharacteristicInterface])
            #expect(tx["UUID"] == .string("6e400003-b5a3-f393-e0a9-e50e24dcca9e"))
            #expect(tx["Flags"]?.stringArray == ["notify"])
            #expect(tx["Notifying"] == .boolean(false))
            #expect(tx["Service"] == .objectPath(Self.nusService))
            #expect(tx["MTU"] == .uint16(247))
            let rx = try #require(objects[Self.rx]?[BlueZ.gattCharacteristicInterface])
            #expect(rx["Flags"]?.stringArray == ["write", "write-without-response"])
            let service = try #require(objects[Self.nusService]?[BlueZ.gattServiceInterface])
            #expect(service["Device"] == .objectPath(Self.device))
            #expect(service["Primary"] == .boolean(true))
            #expect(objects[Self.batteryCCC]?[BlueZ.gattDescriptorInterface]?["UUID"]
                == .string("00002902-0000-1000-8000-00805f9b34fb"))
            #expect(await f.simulator.state == .connected)

            // An LE Connect on a connected device succeeds.
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            #expect(await f.simulator.connectCount == 1)
        }
    }

    @Test func servicesResolvedCanPrecedeTheObjects() async throws {
        try await withSimulator({ $0.resolvedBeforeObjects = true }) { f in
            let signals = try await f.record()
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            let lastObject = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.batteryCCC }
            let resolved = try #require(await signals.messages.first { $0.propertiesChanged(on: Self.device)?["ServicesResolved"] == .boolean(true) })
            #expect(resolved.serial < lastObject.serial)
        }
    }

    // MARK: GATT

    @Test func notificationsCarryIncreasingSequenceNumbers() async throws {
        try await withSimulator({ $0.notifyRate = 100 }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            _ = try await signals.wait { $0.propertiesChanged(on: Self.tx)?["Notifying"] == .boolean(true) }
            try await signals.waitUntil(timeout: .seconds(5)) { await $0.sequences(Self.tx).count >= 20 }
            let sequences = await signals.sequences(Self.tx)
            #expect(Array(sequences.prefix(20)) == Array(1...20))
            let payloads = await signals.messages.compactMap { $0.propertiesChanged(on: Self.tx)?["Value"]?.bytes }
            #expect(payloads.allSatisfy { $0.count == 8 })
            #expect(await f.simulator.lastSequence >= 20)

            // A second StartNotify from the same client is a no-op success.
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StopNotify")
            _ = try await signals.wait { $0.propertiesChanged(on: Self.tx)?["Notifying"] == .boolean(false) }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "No notify session started")) {
                try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StopNotify")
            }
            let stoppedAt = await f.simulator.lastSequence
            try await Task.sleep(for: .milliseconds(100))
            #expect(await f.simulator.lastSequence == stoppedAt, "no notifications without a session")
        }
    }

    @Test func gattPermissionsAndReads() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let gatt = BlueZ.gattCharacteristicInterface
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notPermitted, message: "Read not permitted")) {
                try await f.call(Self.tx, gatt, "ReadValue", [.vardict([:])])
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notPermitted, message: "Write not permitted")) {
                try await f.call(Self.tx, gatt, "WriteValue", [.bytes([1]), .vardict([:])])
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notSupported, message: "Operation is not supported")) {
                try await f.call(Self.rx, gatt, "StartNotify")
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.invalidArguments, message: "Invalid arguments in method call")) {
                try await f.call(Self.rx, gatt, "WriteValue", [.bytes([1]), .vardict(["type": .string("bogus")])])
            }
            try await f.call(Self.rx, gatt, "WriteValue", [.bytes([0x01, 0xab]), .vardict(["type": .string("command")])])
            try await f.call(Self.rx, gatt, "WriteValue", [.bytes([0x02]), .vardict([:])])

            let signals = try await f.record()
            let value = try await f.call(Self.battery, gatt, "ReadValue", [.vardict([:])])
            let level = try #require(value.first?.bytes)
            #expect(level.count == 1 && (1...100).contains(level[0]))
            let change = try await signals.wait { $0.propertiesChanged(on: Self.battery)?["Value"] != nil }
            #expect(change.propertiesChanged(on: Self.battery)?["Value"]?.bytes == level, "a read is also announced as a Value change")

            let events = await f.simulator.events
            let writes = events.filter { $0.kind == .write }
            #expect(writes.map(\.hex) == ["01ab", "02"])
            #expect(writes.map(\.type) == ["command", "request"])
            #expect(writes.allSatisfy { $0.uuid == "6e400002-b5a3-f393-e0a9-e50e24dcca9e" })
            #expect(events.contains { $0.kind == .read && $0.uuid == "00002a19-0000-1000-8000-00805f9b34fb" })
        }
    }

    @Test func gattObjectsStayWithBlueZsDefaultCache() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            await f.simulator.dropLink(reason: "supervision-timeout")
            _ = try await signals.wait { $0.propertiesChanged(on: Self.device) != nil }
            let objects = try await f.managedObjects()
            #expect(objects[Self.tx] != nil, "Cache=always keeps the GATT objects")
            #expect(objects[Self.device]?[BlueZ.deviceInterface]?["ServicesResolved"] == .boolean(false))
            #expect(await !signals.messages.contains { $0.member == "InterfacesRemoved" })
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "Not connected")) {
                try await f.call(Self.battery, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])])
            }
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            _ = try await signals.wait { $0.propertiesChanged(on: Self.device)?["ServicesResolved"] == .boolean(true) }
            #expect(await !signals.messages.contains { $0.member == "InterfacesAdded" })
        }
    }

    @Test func gattObjectsGoAwayWithTheLinkWithoutTheCache() async throws {
        try await withSimulator({ $0.gattCache = false }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            await f.simulator.dropLink(reason: "supervision-timeout")
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.batteryService }
            let all = await signals.messages
            let change = try #require(all.first { $0.propertiesChanged(on: Self.device) != nil })
            #expect(change.propertiesChanged(on: Self.device) == ["Connected": .boolean(false), "ServicesResolved": .boolean(false)])
            let removed = all.filter { $0.member == "InterfacesRemoved" }
            #expect(removed.allSatisfy { $0.serial > change.serial })
            #expect(
                removed.compactMap { $0.body.first?.objectPath }
                    == [Self.rx, Self.txCCC, Self.tx, Self.nusService, Self.batteryCCC, Self.battery, Self.batteryService],
                "descriptors, then characteristics, then their service"
            )
            await #expect(throws: DBusError.self) {
                try await f.call(Self.battery, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])])
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notConnected, message: "Not Connected")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")
            }
            #expect(await f.simulator.events.contains { $0.kind == .disconnected && $0.reason == "supervision-timeout" })
        }
    }

    // MARK: Sleep model

    @Test func writesKeepTheDongleAwakeAndSilenceSendsItToSleep() async throws {
        try await withSimulator({ $0.sleepAfter = .milliseconds(500) }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            // StartNotify is not activity; writes are.
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            for _ in 0..<9 {
                try await Task.sleep(for: .milliseconds(100))
                try await f.call(Self.rx, BlueZ.gattCharacteristicInterface, "WriteValue", [.bytes([0x00]), .vardict([:])])
            }
            #expect(await f.simulator.state == .connected, "writes every 100 ms keep a 500 ms idle timer from firing")
            let wrote = ContinuousClock.now
            _ = try await signals.wait { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(false) }
            #expect(ContinuousClock.now - wrote >= .milliseconds(450))
            #expect(await f.simulator.state == .asleep)
            #expect(await f.simulator.events.contains { $0.kind == .sleep && $0.reason == "idle" })

            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-abort-by-local")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-abort-by-local")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            await f.simulator.wake()
            #expect(await f.simulator.state == .advertising)
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            #expect(await f.simulator.state == .connected)
        }
    }

    @Test func aConnectToASleepingDongleWaitsAndSucceedsIfItWakes() async throws {
        try await withSimulator({ $0.noAnswerTimeout = .seconds(5) }) { f in
            await f.simulator.sleep()
            let client = f.client
            let pending = Task { () async throws -> [DBusValue] in
                try await client.call(destination: BlueZ.service, path: Self.device, interface: BlueZ.deviceInterface, method: "Connect")
            }
            try await Task.sleep(for: .milliseconds(200))
            // Still unanswered: bluetoothd counts it as pending.
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.inProgress, message: BlueZ.FailedMessage.inProgressText)) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            let woken = ContinuousClock.now
            await f.simulator.wake()
            _ = try await pending.value
            #expect(ContinuousClock.now - woken < .seconds(1))
            #expect(await f.simulator.state == .connected)
        }
    }

    @Test func anUnansweredDongleStopsAdvertisingAfterTheTimeout() async throws {
        try await withSimulator({ $0.advertiseTimeout = .milliseconds(300) }) { f in
            try await f.connectAndResolve()
            await f.simulator.dropLink(reason: "timeout")
            #expect(await f.simulator.state == .advertising)
            #expect(await eventually(timeout: .seconds(3)) { await f.simulator.state == .asleep })
            #expect(await f.simulator.events.contains { $0.kind == .sleep && $0.reason == "advertising-timeout" })
        }
    }

    // MARK: Connect races

    @Test func aSecondConnectWhileOneIsPendingIsInProgress() async throws {
        try await withSimulator({ $0.connectLatency = .milliseconds(400) }) { f in
            let first = Task { try await f.call(Self.device, BlueZ.deviceInterface, "Connect") }
            try await Task.sleep(for: .milliseconds(50))
            let start = ContinuousClock.now
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.inProgress, message: "Operation already in progress")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            #expect(ContinuousClock.now - start < .milliseconds(300), "InProgress comes at once")
            _ = try await first.value
            #expect(await f.simulator.state == .connected)
        }
    }

    @Test func disconnectCancelsAPendingConnect() async throws {
        try await withSimulator({ $0.connectLatency = .seconds(20) }) { f in
            let start = ContinuousClock.now
            let pending = Task { try await f.call(Self.device, BlueZ.deviceInterface, "Connect") }
            try await Task.sleep(for: .milliseconds(50))
            try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-abort-by-local")) {
                _ = try await pending.value
            }
            #expect(ContinuousClock.now - start < .seconds(5))
            #expect(await f.simulator.state == .advertising)
            let failed = await f.simulator.events.filter { $0.kind == .connectFailed }
            #expect(failed.map(\.message) == ["le-connection-abort-by-local"])
        }
    }

    /// Closing the controller drops the connection the kernel is still
    /// making (hci_conn_hash_flush), so bluetoothd answers the Connect
    /// waiting on it: nothing is left pending for a Connect after power
    /// returns to meet (`make dst` seed 5067 met InProgress there).
    @Test func poweringOffAnswersAPendingConnect() async throws {
        try await withSimulator({ $0.connectLatency = .seconds(20) }) { f in
            let start = ContinuousClock.now
            let pending = Task { try await f.call(Self.device, BlueZ.deviceInterface, "Connect") }
            try await Task.sleep(for: .milliseconds(50))
            await f.simulator.setAdapterPowered(false)
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-abort-by-local")) {
                _ = try await pending.value
            }
            #expect(ContinuousClock.now - start < .seconds(5))
            let failed = await f.simulator.events.filter { $0.kind == .connectFailed }
            #expect(failed.map(\.message) == ["le-connection-abort-by-local"])
        }
    }

    @Test func disconnectTakesItsTimeThenDropsTheLink() async throws {
        try await withSimulator({ $0.disconnectDelay = .milliseconds(200) }) { f in
            try await f.connectAndResolve()
            let start = ContinuousClock.now
            try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")
            #expect(ContinuousClock.now - start >= .milliseconds(180))
            #expect(await f.simulator.state == .advertising)
            let objects = try await f.managedObjects()
            #expect(objects[Self.device]?[BlueZ.deviceInterface]?["Connected"] == .boolean(false))
            #expect(objects[Self.device]?[BlueZ.deviceInterface]?["ServicesResolved"] == .boolean(false))
        }
    }

    @Test func injectedFailuresAreUsedUp() async throws {
        try await withSimulator { f in
            await f.simulator.failNextConnects(2, errorName: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.connectionTimeout)
            for _ in 0..<2 {
                await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-timeout")) {
                    try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
                }
            }
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
        }
    }

    // MARK: Notify sessions across link loss

    @Test func notifySessionsSurviveALinkLoss() async throws {
        try await withSimulator({ $0.notifyRate = 50; $0.gattCache = false }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            try await signals.waitUntil(timeout: .seconds(5)) { await $0.sequences(Self.tx).count >= 5 }

            // Through the control interface, as another process would.
            _ = try await f.client.call(
                destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
                method: "DropLink", [.string("supervision-timeout")]
            )
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.tx }
            let beforeReconnect = await signals.sequences(Self.tx)

            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            let added = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.tx }
            let properties = added.body.last?.stringKeyedDictionary?[BlueZ.gattCharacteristicInterface]?.stringKeyedDictionary
            #expect(properties?["Notifying"]?.unwrapped == .boolean(true), "the re-exported TX char is already notifying")
            try await signals.waitUntil(timeout: .seconds(5)) {
                await $0.sequences(Self.tx).count >= beforeReconnect.count + 5
            }
            let all = await signals.sequences(Self.tx)
            #expect(all == Array(1...UInt32(all.count)), "sequence numbers continue across the reconnect")

            // A second StartNotify from the same client does not double the stream.
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            let countBefore = await signals.sequences(Self.tx).count
            try await Task.sleep(for: .milliseconds(500))
            let received = await signals.sequences(Self.tx)
            let fresh = received.count - countBefore
            #expect(fresh >= 10 && fresh <= 40, "about 25 notifications in 500 ms at 50/s, got \(fresh)")
            #expect(Set(received).count == received.count, "no sequence number twice")
        }
    }

    /// gatt-client.c: a link loss leaves each session without a notify id
    /// until the next link's ATT channel registers it again; meanwhile its
    /// client's StartNotify is `InProgress`. A client without a session is
    /// given one for the next link, and the call succeeds.
    @Test func aSessionWaitingForTheNextLinkAnswersInProgress() async throws {
        try await withSimulator({ $0.notifyRate = 50 }) { f in
            try await f.connectAndResolve()
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            await f.simulator.dropLink(reason: "supervision-timeout")
            #expect(await f.callError(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
                == DBusError.remote(name: BlueZ.ErrorName.inProgress, message: "In Progress"))
            let other = try await Bus.connect(address: f.daemon.address)
            _ = try await other.call(destination: BlueZ.service, path: Self.tx, interface: BlueZ.gattCharacteristicInterface, method: "StartNotify")
            let otherSignals = try await f.record()
            try await f.connectAndResolve()
            // Both sessions enabled by the link alone; a second StartNotify is success again.
            try await otherSignals.waitUntil(timeout: .seconds(5)) { await $0.sequences(Self.tx).count >= 3 }
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            _ = try await other.call(destination: BlueZ.service, path: Self.tx, interface: BlueZ.gattCharacteristicInterface, method: "StartNotify")
            let events = await f.simulator.events.filter { $0.kind == .startNotify }
            #expect(events.map(\.reason) == [nil, "until-connected"])
            await other.close()
        }
    }

    @Test func aClientLeavingTheBusEndsItsSessions() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let other = try await Bus.connect(address: f.daemon.address)
            let otherName = await other.uniqueName
            _ = try await other.call(destination: BlueZ.service, path: Self.tx, interface: BlueZ.gattCharacteristicInterface, method: "StartNotify")
            _ = try await other.call(destination: BlueZ.service, path: Self.adapter, interface: BlueZ.adapterInterface, method: "StartDiscovery")
            let signals = try await f.record()
            await other.close()
            _ = try await signals.wait { $0.propertiesChanged(on: Self.tx)?["Notifying"] == .boolean(false) }
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Discovering"] == .boolean(false) }
            let events = await f.simulator.events
            #expect(events.contains { $0.kind == .stopNotify && $0.client == otherName && $0.reason == "client-left" })
            #expect(events.contains { $0.kind == .discoveryStop && $0.client == otherName && $0.reason == "client-left" })
        }
    }

    // MARK: Telemetry rate

    @Test func highNotifyRatesAreSustained() async throws {
        try await withSimulator({ $0.notifyRate = 2000 }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record(bufferLimit: 100_000)
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            try await Task.sleep(for: .seconds(1))
            await f.simulator.setNotifyRate(0)
            let sent = await f.simulator.lastSequence
            // Under load the sender skips what it could not send in time, never more.
            #expect(sent >= 1000 && sent <= 2300, "about 2000 in one second, sent \(sent)")
            try await signals.waitUntil(timeout: .seconds(5)) { await $0.sequences(Self.tx).count >= Int(sent) }
            #expect(await signals.sequences(Self.tx) == Array(1...sent))
        }
    }

    // MARK: bluetoothd going away

    @Test func aCrashShowsOnlyAsANameOwnerChange() async throws {
        try await withSimulator({ $0.notifyRate = 50 }) { f in
            try await f.connectAndResolve()
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            let owners = try await f.client.nameOwnerChanges(of: BlueZ.service)
            var ownerChanges = owners.makeAsyncIterator()
            let firstOwner = try #require(await ownerChanges.next() ?? nil)
            let signals = try await f.record(MatchRule(interface: StandardInterface.objectManager))

            await f.simulator.crash(restartAfter: .milliseconds(300))
            #expect(await ownerChanges.next() == .some(nil))
            #expect(await f.simulator.state == .advertising, "the link dropped with bluetoothd")
            let secondOwner = try #require(await ownerChanges.next() ?? nil)
            #expect(secondOwner != firstOwner)
            #expect(await f.simulator.bluezUniqueName == secondOwner)
            // Like bluetoothd, the new instance takes the name first and then
            // announces the adapter and the remembered device.
            _ = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.device }
            let removals = await signals.messages.filter { $0.member == "InterfacesRemoved" }
            #expect(removals.isEmpty, "a crash removes nothing visibly")

            let objects = try await f.managedObjects()
            #expect(Set(objects.keys) == ["/org/bluez", Self.adapter, Self.device])
            #expect(objects[Self.device]?[BlueZ.deviceInterface]?["Connected"] == .boolean(false))
            #expect(objects[Self.adapter]?[BlueZ.adapterInterface]?["Discovering"] == .boolean(false))

            // Sessions died with bluetoothd: after a reconnect nothing notifies.
            try await f.connectAndResolve()
            let tx = try await f.managedObjects()[Self.tx]?[BlueZ.gattCharacteristicInterface]
            #expect(tx?["Notifying"] == .boolean(false))
            let events = await f.simulator.events
            #expect(events.contains { $0.kind == .crash })
            #expect(events.contains { $0.kind == .restarted && $0.error == nil })
            #expect(events.contains { $0.kind == .stopNotify && $0.reason == "bluetoothd-crash" })
        }
    }

    @Test func aGracefulRestartRemovesEveryObjectFirst() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let signals = try await f.record(MatchRule(interface: StandardInterface.objectManager))
            let owners = try await f.client.nameOwnerChanges(of: BlueZ.service)
            var ownerChanges = owners.makeAsyncIterator()
            _ = await ownerChanges.next()
            await f.simulator.restart(after: .milliseconds(200))
            #expect(await ownerChanges.next() == .some(nil))
            // The recorder reads its own stream: wait for the last removal to reach it.
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.adapter }
            let removed = await signals.messages.filter { $0.member == "InterfacesRemoved" }.compactMap { $0.body.first?.objectPath }
            #expect(Set(removed) == Set(Self.gattPaths + [Self.device, Self.adapter]))
            #expect(removed.suffix(2) == [Self.device, Self.adapter])
            #expect(await ownerChanges.next() != .some(nil))
            _ = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.device }
        }
    }

    // MARK: Adapter

    @Test func poweringOffDropsTheLinkAndMakesTheAdapterNotReady() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            let signals = try await f.record()
            try await f.client.setRemoteProperty(
                destination: BlueZ.service, path: Self.adapter, interface: BlueZ.adapterInterface, name: "Powered",
                value: .boolean(false)
            )
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Powered"] == .boolean(false) }
            let all = await signals.messages
            #expect(all.contains { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(false) })
            #expect(all.contains { $0.propertiesChanged(on: Self.adapter)?["Discovering"] == .boolean(false) })
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            }
            await f.simulator.setAdapterPowered(true)
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
        }
    }

    @Test func discoverySessionsFiltersAndRSSI() async throws {
        try await withSimulator({ $0.known = false; $0.advertisingInterval = .milliseconds(30) }) { f in
            #expect(try await f.managedObjects()[Self.device] == nil, "an unknown device appears only when seen")
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.invalidArguments, message: "Invalid arguments in method call")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict(["Colour": .string("blue")])])
            }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.invalidArguments, message: "Invalid arguments in method call")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict(["Transport": .string("warp")])])
            }
            try await f.call(Self.adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict([
                "UUIDs": .strings(["6e400001-b5a3-f393-e0a9-e50e24dcca9e"]), "Transport": .string("le"),
                "DuplicateData": .boolean(true),
            ])])
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "No discovery started")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "StopDiscovery")
            }
            let signals = try await f.record()
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.inProgress, message: "Operation already in progress")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            }
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Discovering"] == .boolean(true) }
            let added = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.device }
            let device = added.body.last?.stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary
            #expect(device?["RSSI"]?.int64 != nil)
            try await signals.waitUntil(timeout: .seconds(3)) { log in
                await log.messages.filter { $0.propertiesChanged(on: Self.device)?["RSSI"] != nil }.count >= 3
            }
            let values = await signals.messages.compactMap { $0.propertiesChanged(on: Self.device)?["RSSI"]?.int64 }
            #expect(values.allSatisfy { (-90 ... -40).contains($0) })

            try await f.call(Self.adapter, BlueZ.adapterInterface, "StopDiscovery")
            let invalidation = try await signals.wait { $0.invalidatedProperties(on: Self.device).contains("RSSI") }
            #expect(invalidation.propertiesChanged(on: Self.device)?.isEmpty == true)
            _ = try await signals.wait { $0.propertiesChanged(on: Self.adapter)?["Discovering"] == .boolean(false) }

            // The device stays known: Connect works on it.
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            try await f.call(Self.adapter, BlueZ.adapterInterface, "RemoveDevice", [.objectPath(Self.device)])
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.device }
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.doesNotExist, message: "Does Not Exist")) {
                try await f.call(Self.adapter, BlueZ.adapterInterface, "RemoveDevice", [.objectPath(Self.device)])
            }
            let gone = await f.callError(Self.device, BlueZ.deviceInterface, "Connect")
            #expect(gone?.name == DBusErrorName.unknownObject)
        }
    }

    /// bluetoothd deletes the device object before it answers RemoveDevice
    /// and announces the removal later, from its idle callback: between the
    /// two, the object is still in every client's view and a call on it
    /// fails with UnknownObject.
    @Test func removeDeviceAnswersBeforeItAnnouncesTheRemoval() async throws {
        try await withSimulator({ $0.removalSignalDelay = .milliseconds(300) }) { f in
            let signals = try await f.record()
            try await f.call(Self.adapter, BlueZ.adapterInterface, "RemoveDevice", [.objectPath(Self.device)])
            let answered = ContinuousClock.now
            #expect(await !signals.messages.contains { $0.member == "InterfacesRemoved" }, "InterfacesRemoved came before the reply")
            let gone = await f.callError(Self.device, BlueZ.deviceInterface, "Connect")
            #expect(gone?.name == DBusErrorName.unknownObject)
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.device }
            #expect(ContinuousClock.now - answered >= .milliseconds(250))
        }
    }

    @Test func aFilterForOtherServicesHidesTheDongle() async throws {
        try await withSimulator({ $0.known = false; $0.advertisingInterval = .milliseconds(20) }) { f in
            try await f.call(Self.adapter, BlueZ.adapterInterface, "SetDiscoveryFilter", [.vardict(["UUIDs": .strings(["180d"])])])
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            try await Task.sleep(for: .milliseconds(200))
            #expect(try await f.managedObjects()[Self.device] == nil)
        }
    }

    // MARK: Control interface and event log

    @Test func theControlInterfaceIsReachableOverDBus() async throws {
        try await withSimulator { f in
            func control(_ method: String, _ arguments: [DBusValue] = []) async throws {
                _ = try await f.client.call(
                    destination: SimulatorControl.busName, path: SimulatorControl.path,
                    interface: SimulatorControl.interface, method: method, arguments
                )
            }
            func property(_ name: String) async throws -> DBusValue {
                try await f.client.getProperty(
                    destination: SimulatorControl.busName, path: SimulatorControl.path,
                    interface: SimulatorControl.interface, name: name
                )
            }
            #expect(try await property("State") == .string("advertising"))
            try await control("FailConnects", [.uint32(1), .string(BlueZ.ErrorName.failed), .string("le-connection-refused")])
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: "le-connection-refused")) {
                try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            }
            await #expect(throws: DBusError.self) {
                try await control("FailConnects", [.uint32(1), .string("not an error name"), .string("x")])
            }
            try await control("SetConnectLatency", [.uint32(150)])
            let start = ContinuousClock.now
            try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
            #expect(ContinuousClock.now - start >= .milliseconds(140))
            #expect(try await property("State") == .string("connected"))
            #expect(try await property("Connects") == .uint32(1))

            try await control("SetNotifyRate", [.double(200)])
            try await f.resolve()
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            #expect(await eventually { ((try? await property("Sequence"))?.int64 ?? 0) >= 10 })

            try await control("Sleep")
            #expect(try await property("State") == .string("asleep"))
            try await control("Wake")
            #expect(try await property("State") == .string("advertising"))
            try await control("SetAdapterPowered", [.boolean(false)])
            let powered = try await f.client.getProperty(
                destination: BlueZ.service, path: Self.adapter, interface: BlueZ.adapterInterface, name: "Powered"
            )
            #expect(powered == .boolean(false))
            try await control("SetAdapterPowered", [.boolean(true)])

            let owner = await f.simulator.bluezUniqueName
            try await control("Restart", [.uint32(50)])
            #expect(await eventually { await f.simulator.bluezUniqueName.map { $0 != owner } ?? false })
            let crashedOwner = await f.simulator.bluezUniqueName
            try await control("Crash", [.uint32(50)])
            #expect(await eventually { await f.simulator.bluezUniqueName.map { $0 != crashedOwner } ?? false })
            // The control connection survived both.
            #expect(try await property("State") == .string("advertising"))
            try await control("DropLink", [.string("nothing to drop")])
        }
    }

    @Test func theEventLogFileParses() async throws {
        let directory = try TemporaryDirectory("simulator-log")
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("events.jsonl").path
        try await withSimulator({ $0.eventLogPath = path; $0.notifyRate = 100 }) { f in
            try await f.connectAndResolve()
            try await f.call(Self.rx, BlueZ.gattCharacteristicInterface, "WriteValue", [.bytes([0xca, 0xfe]), .vardict([:])])
            try await f.call(Self.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            #expect(await eventually { await f.simulator.lastSequence >= 5 })
            await f.simulator.dropLink(reason: "test \"quoted\"\n")
            // The file is written as events happen, not at stop.
            let onDisk = try SimulatorEvent.readLog(path: path)
            let inMemory = await f.simulator.events
            #expect(onDisk.count == inMemory.count)
            #expect(onDisk.map(\.ev) == inMemory.map(\.ev))
            #expect(zip(onDisk, inMemory).allSatisfy { abs($0.t - $1.t) < 0.001 })
            #expect(onDisk.allSatisfy { $0.kind != nil }, "every event has a known name")
            #expect(zip(onDisk, onDisk.dropFirst()).allSatisfy { $0.t <= $1.t }, "monotonic timestamps")
            let kinds = onDisk.compactMap(\.kind)
            for kind: SimulatorEvent.Kind in [.advertising, .connectRequest, .connected, .write, .startNotify, .notify, .disconnected] {
                #expect(kinds.contains(kind), "\(kind) logged")
            }
            #expect(onDisk.first { $0.kind == .write }?.hex == "cafe")
            #expect(onDisk.first { $0.kind == .disconnected }?.reason == "test \"quoted\"\n")
            #expect(onDisk.filter { $0.kind == .notify }.compactMap(\.seq).prefix(5) == [1, 2, 3, 4, 5])
            let client = await f.client.uniqueName
            #expect(onDisk.first { $0.kind == .connectRequest }?.client == client)
        }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix("{\"t\":"))
        #expect(text.hasSuffix("}\n"))
    }

    @Test func stopIsQuietAndComplete() async throws {
        let directory = try TemporaryDirectory("simulator-stop")
        defer { directory.remove() }
        let daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        defer { daemon.stop() }
        let simulator = try await Simulator.start(busAddress: daemon.address, options: SimulatorOptions())
        let client = try await Bus.connect(address: daemon.address)
        #expect(try await client.nameOwner(of: BlueZ.service) != nil)
        #expect(try await client.nameOwner(of: SimulatorControl.busName) != nil)
        await simulator.stop()
        // The bus daemon releases the names of closed connections.
        #expect(await eventually { (try? await client.nameOwner(of: BlueZ.service)) == .some(nil) })
        #expect(await eventually { (try? await client.nameOwner(of: SimulatorControl.busName)) == .some(nil) })
        await simulator.stop()  // twice is fine
        await client.close()
    }

    @Test func invalidOptionsAreRejected() async throws {
        var options = SimulatorOptions()
        options.address = "not-an-address"
        await #expect(throws: SimulatorError.invalidAddress("not-an-address")) {
            _ = try await Simulator.start(busAddress: "unix:path=/nonexistent", options: options)
        }
    }
}

// MARK: - Fixture

/// A private dbus-daemon, a running simulator and a client connection.
final class SimulatorFixture: Sendable {
    let directory: TemporaryDirectory
    let daemon: BusDaemonProcess
    let simulator: Simulator
    let client: Bus

    init(configure: (inout SimulatorOptions) -> Void) async throws {
        directory = try TemporaryDirectory("simulator-test")
        do {
            daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        } catch {
            directory.remove()
            throw error
        }
        var options = SimulatorOptions()
        options.noAnswerTimeout = .milliseconds(150)  // the kernel's 20 s, shortened
        configure(&options)
        do {
            simulator = try await Simulator.start(busAddress: daemon.address, options: options)
        } catch {
            daemon.stop()
            directory.remove()
            throw error
        }
        do {
            client = try await Bus.connect(address: daemon.address)
        } catch {
            await simulator.stop()
            daemon.stop()
            directory.remove()
            throw error
        }
    }

    func close() async {
        await client.close()
        await simulator.stop()
        daemon.stop()
        directory.remove()
    }

    @discardableResult
    func call(_ path: ObjectPath, _ interface: String, _ method: String, _ arguments: [DBusValue] = []) async throws
        -> [DBusValue]
    {
        try await client.call(
            destination: BlueZ.service, path: path, interface: interface, method: method, arguments,
            timeout: .seconds(10)
        )
    }

    func callError(_ path: ObjectPath, _ interface: String, _ method: String, _ arguments: [DBusValue] = []) async
        -> DBusError?
    {
        do {
            try await call(path, interface, method, arguments)
            return nil
        } catch {
            return error as? DBusError
        }
    }

    /// GetManagedObjects as path → interface → properties (values unwrapped).
    func managedObjects() async throws -> [ObjectPath: [String: [String: DBusValue]]] {
        let reply = try await call(.root, StandardInterface.objectManager, "GetManagedObjects")
        let objects = try #require(reply.first?.objectPathKeyedDictionary)
        return objects.mapValues { interfaces in
            (interfaces.stringKeyedDictionary ?? [:]).mapValues { properties in
                (properties.stringKeyedDictionary ?? [:]).mapValues(\.unwrapped)
            }
        }
    }

    /// Records every signal matching `rule` (by default everything org.bluez sends).
    func record(_ rule: MatchRule = MatchRule(sender: BlueZ.service), bufferLimit: Int = 8192) async throws
        -> SignalRecording
    {
        SignalRecording(try await client.signals(matching: rule, bufferLimit: bufferLimit))
    }

    /// Waits for the GATT objects of the current connection.
    func resolve() async throws {
        let resolved = await eventually(timeout: .seconds(5)) {
            let objects = try? await self.managedObjects()
            let device = objects?[SimulatorTests.device]?[BlueZ.deviceInterface]
            return objects?[SimulatorTests.batteryCCC] != nil && device?["ServicesResolved"] == .boolean(true)
        }
        try #require(resolved, "GATT objects and ServicesResolved within 5 s")
    }

    func connectAndResolve() async throws {
        try await call(SimulatorTests.device, BlueZ.deviceInterface, "Connect")
        try await resolve()
    }
}

/// Runs `body` against a fresh fixture and always cleans up.
func withSimulator(
    _ configure: (inout SimulatorOptions) -> Void = { _ in }, _ body: (SimulatorFixture) async throws -> Void
) async throws {
    let fixture = try await SimulatorFixture(configure: configure)
    do {
        try await body(fixture)
    } catch {
        await fixture.close()
        throw error
    }
    await fixture.close()
}

/// Signals collected in arrival order by a background task.
final class SignalRecording: Sendable {
    actor Log {
        private(set) var messages: [Message] = []
        func append(_ message: Message) { messages.append(message) }

        /// Notification sequence numbers received on `path`, in order.
        func sequences(_ path: ObjectPath) -> [UInt32] {
            messages.compactMap { message in
                guard let value = message.propertiesChanged(on: path)?["Value"]?.bytes, value.count >= 4 else { return nil }
                return UInt32(value[0]) | UInt32(value[1]) << 8 | UInt32(value[2]) << 16 | UInt32(value[3]) << 24
            }
        }
    }

    let log = Log()
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<Message>) {
        let log = log
        task = Task {
            for await message in stream { await log.append(message) }
        }
    }

    deinit { task.cancel() }

    var messages: [Message] { get async { await log.messages } }

    func sequences(_ path: ObjectPath) async -> [UInt32] { await log.sequences(path) }

    /// The first recorded message satisfying `predicate`, waiting up to `timeout`.
    func wait(timeout: Duration = .seconds(3), _ predicate: @escaping @Sendable (Message) -> Bool) async throws
        -> Message
    {
        var found: Message?
        _ = await eventually(timeout: timeout, every: .milliseconds(5)) {
            found = await log.messages.first(where: predicate)
            return found != nil
        }
        return try #require(found, "no matching signal within \(timeout)")
    }

    /// Waits until `condition` holds on the log.
    func waitUntil(timeout: Duration = .seconds(3), _ condition: (Log) async -> Bool) async throws {
        let met = await eventually(timeout: timeout, every: .milliseconds(5)) { await condition(log) }
        try #require(met, "condition not met within \(timeout)")
    }
}

extension Message {
    /// The changed properties if this is a PropertiesChanged on `path`.
    func propertiesChanged(on path: ObjectPath) -> [String: DBusValue]? {
        guard member == "PropertiesChanged", self.path == path, body.count >= 2 else { return nil }
        return body[1].stringKeyedDictionary?.mapValues(\.unwrapped)
    }

    /// The invalidated properties if this is a PropertiesChanged on `path`.
    func invalidatedProperties(on path: ObjectPath) -> [String] {
        guard member == "PropertiesChanged", self.path == path, body.count >= 3 else { return [] }
        return body[2].stringArray ?? []
    }
}
