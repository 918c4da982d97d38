@testable import BlueZ
import DBus
import Testing

@Suite struct ObjectTreeTests {
    static let adapter: ObjectPath = "/org/bluez/hci0"
    static let device: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"
    static let tx: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000d"

    static func interfaces(_ entries: [String: [String: DBusValue]]) -> DBusValue {
        .dictionary(
            key: .string, value: .dictionary(key: .string, value: .variant),
            entries.sorted { $0.key < $1.key }.map { .init(.string($0.key), .vardict($0.value)) }
        )
    }

    static func managed(_ objects: [ObjectPath: DBusValue]) -> DBusValue {
        .dictionary(
            key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)),
            objects.sorted { $0.key < $1.key }.map { .init(.objectPath($0.key), $0.value) }
        )
    }

    static var sample: ObjectTree {
        get throws {
            try ObjectTree(managedObjects: managed([
                adapter: interfaces([
                    "org.bluez.Adapter1": ["Address": .string("00:11:22:33:44:55"), "Powered": .boolean(true)],
                    "org.freedesktop.DBus.Properties": [:],
                ]),
                device: interfaces([
                    "org.bluez.Device1": [
                        "Address": .string("aa:bb:cc:dd:ee:ff"), "Connected": .boolean(false), "Adapter": .objectPath(adapter),
                        "UUIDs": .strings(["6E400001-B5A3-F393-E0A9-E50E24DCCA9E"]),
                        "ManufacturerData": .dictionary(key: .uint16, value: .variant, [.init(.uint16(0x0059), .variant(.bytes([1, 2])))]),
                    ],
                ]),
            ]))
        }
    }

    @Test func parsesManagedObjectsIntoTypedViews() throws {
        let tree = try Self.sample
        #expect(tree.adapters.map(\.path) == [Self.adapter])
        #expect(tree.adapter(Self.adapter)?.powered == true)
        let device = try #require(tree.device(Self.device))
        #expect(device.address == "AA:BB:CC:DD:EE:FF")
        #expect(device.adapter == Self.adapter)
        #expect(device.uuids == ["6e400001-b5a3-f393-e0a9-e50e24dcca9e"])
        #expect(device.manufacturerData[0x0059] == [1, 2])
        #expect(device.rssi == nil)
        // Standard interfaces are not kept.
        #expect(tree.objects[Self.adapter]?.keys.sorted() == ["org.bluez.Adapter1"])
    }

    @Test func appliesAddedChangedAndRemoved() throws {
        var tree = try Self.sample
        tree.apply(.interfacesAdded(Self.tx, Self.interfaces([
            "org.bluez.GattCharacteristic1": [
                "UUID": .string("6E400003-B5A3-F393-E0A9-E50E24DCCA9E"), "Flags": .strings(["notify"]),
                "Notifying": .boolean(false), "Value": .bytes([9]),
            ],
        ])))
        let characteristic = try #require(tree.characteristic(uuid: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", of: Self.device))
        #expect(characteristic.canNotify && !characteristic.canRead)
        #expect(tree.properties(Self.tx, "org.bluez.GattCharacteristic1")?["Value"] == nil, "values are readings, not state")

        tree.apply(.propertiesChanged(Self.device, interface: "org.bluez.Device1", changed: ["Connected": .variant(.boolean(true)), "RSSI": .variant(.int16(-60))], invalidated: []))
        #expect(tree.device(Self.device)?.connected == true)
        #expect(tree.device(Self.device)?.rssi == -60)
        tree.apply(.propertiesChanged(Self.device, interface: "org.bluez.Device1", changed: [:], invalidated: ["RSSI"]))
        #expect(tree.device(Self.device)?.rssi == nil)

        // A change for an object that is gone is ignored, not resurrected.
        tree.apply(.interfacesRemoved(Self.tx, ["org.bluez.GattCharacteristic1", "org.freedesktop.DBus.Properties"]))
        #expect(tree.objects[Self.tx] == nil)
        tree.apply(.propertiesChanged(Self.tx, interface: "org.bluez.GattCharacteristic1", changed: ["Notifying": .boolean(true)], invalidated: []))
        #expect(tree.objects[Self.tx] == nil)

        tree.apply(.serviceVanished)
        #expect(tree.objects.isEmpty)
    }

    @Test func rejectsMalformedReplies() {
        #expect(throws: BlueZError.self) { try ObjectTree(managedObjects: .string("nope")) }
        #expect(throws: BlueZError.self) {
            try ObjectTree(managedObjects: Self.managed([Self.device: .uint32(3)]))
        }
        #expect(throws: BlueZError.self) {
            try ObjectTree(managedObjects: Self.managed([Self.device: .dictionary(key: .string, value: .variant, [.init(.string("org.bluez.Device1"), .variant(.uint32(1)))])]))
        }
    }

    @Test func devicePathFollowsBlueZsShape() {
        #expect(Device.path(adapter: Self.adapter, address: "aa:bb:cc:dd:ee:ff") == Self.device)
        #expect(Device.path(adapter: Self.adapter, address: "AA:bb:Cc:dD:EE:ff") == Self.device)
    }

    /// Only what an object path may hold gets through; an address with
    /// anything else has no path rather than a wrong one.
    @Test func aDeviceAddressThatIsNoPathElementHasNoPath() {
        #expect(Device.path(adapter: Self.adapter, address: "aa:bb:cc:dd:ee:é") == nil)
        #expect(Device.path(adapter: Self.adapter, address: "aa-bb") == nil)
    }
}

@Suite struct BlueZErrorTests {
    @Test(arguments: [
        ("org.bluez.Error.Failed", "le-connection-abort-by-local", BlueZError.Disposition.transient),
        ("org.bluez.Error.Failed", "le-connection-timeout", .transient),
        ("org.bluez.Error.Failed", "le-connection-busy", .transient),
        ("org.bluez.Error.Failed", "Not connected", .transient),
        ("org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e", .transient),
        ("org.bluez.Error.InProgress", "Operation already in progress", .needsCancel),
        ("org.bluez.Error.Failed", "Operation already in progress", .needsCancel),
        ("org.bluez.Error.NotReady", "Resource Not Ready", .transient),
        ("org.bluez.Error.NotConnected", "Not Connected", .transient),
        ("org.bluez.Error.NotPermitted", "Write not permitted", .fatal),
        ("org.bluez.Error.NotAuthorized", "", .fatal),
        ("org.freedesktop.DBus.Error.UnknownObject", "Method \"Connect\" …", .transient),
        ("org.freedesktop.DBus.Error.NoReply", "", .transient),
        ("org.freedesktop.DBus.Error.ServiceUnknown", "", .transient),
        ("org.freedesktop.DBus.Error.AccessDenied", "", .fatal),
        ("com.example.Error.Brand.New", "", .transient),
    ])
    func classifies(name: String, message: String, expected: BlueZError.Disposition) {
        #expect(BlueZError(name: name, message: message).disposition == expected)
    }

    @Test func carriesDBusErrors() {
        let error = BlueZError(DBusError.timeout)
        #expect(error.name == "org.freedesktop.DBus.Error.NoReply")
        #expect(BlueZError(.remote(name: "org.bluez.Error.NotReady", message: "Resource Not Ready")).isAdapterNotReady)
        #expect(BlueZError(.remote(name: "org.freedesktop.DBus.Error.UnknownObject", message: "")).isUnknownObject)
        // libdbus's text for a gone object ends in a newline (seen in `make e2e`).
        let gone = BlueZError(.remote(
            name: "org.freedesktop.DBus.Error.UnknownObject",
            message: "Method \"Connect\" with signature \"\" on interface \"org.bluez.Device1\" doesn't exist\n"))
        #expect(gone.description == "org.freedesktop.DBus.Error.UnknownObject: Method \"Connect\" with signature \"\" on interface \"org.bluez.Device1\" doesn't exist")
    }
}

@Suite struct BlueZEventParsingTests {
    static func signal(_ interface: String, _ member: String, path: ObjectPath, _ body: [DBusValue]) -> Message {
        Message(
            kind: .signal, serial: 1, replySerial: 0, sender: ":1.5", destination: nil, path: path, interface: interface,
            member: member, errorName: nil, signature: "", body: body, noReplyExpected: false
        )
    }

    @Test func aValueChangeIsAReading() {
        let message = Self.signal("org.freedesktop.DBus.Properties", "PropertiesChanged", path: ObjectTreeTests.tx, [
            .string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([1, 2, 3])]), .strings([]),
        ])
        guard case .valueChanged(let path, let bytes)? = BlueZClient.event(from: message) else {
            Issue.record("not a value change")
            return
        }
        #expect(path == ObjectTreeTests.tx && bytes == [1, 2, 3])
    }

    @Test func malformedSignalsAreIgnored() {
        #expect(BlueZClient.event(from: Self.signal("org.freedesktop.DBus.ObjectManager", "InterfacesAdded", path: "/", [.string("x")])) == nil)
        #expect(BlueZClient.event(from: Self.signal("org.freedesktop.DBus.Properties", "PropertiesChanged", path: "/x", [.uint32(1)])) == nil)
        #expect(BlueZClient.event(from: Self.signal("org.example.Other", "Ping", path: "/", [])) == nil)
    }
}
