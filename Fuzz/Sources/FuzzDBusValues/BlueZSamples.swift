import DBus

/// Property sets shaped like what bluetoothd sends for a gateway's adapter and
/// a Nordic UART dongle (names and types from BlueZ's doc/org.bluez.*.rst):
/// the material for the seeds.
public enum BlueZSamples {
    public static let adapterPath: ObjectPath = "/org/bluez/hci0"
    public static let devicePath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"
    public static let servicePath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a"
    public static let txPath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000b"
    public static let rxPath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000e"

    public static let nusService = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"
    public static let nusRX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
    public static let nusTX = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

    public static let adapter: [String: DBusValue] = [
        "Address": .string("00:1A:7D:DA:71:13"), "AddressType": .string("public"), "Name": .string("gateway"),
        "Alias": .string("gateway"), "Class": .uint32(0x6c_0104), "Powered": .boolean(true),
        "Discoverable": .boolean(false), "DiscoverableTimeout": .uint32(180), "Pairable": .boolean(false),
        "Discovering": .boolean(false),
        "UUIDs": .strings(["0000110e-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb"]),
        "Modalias": .string("usb:v1D6Bp0246d0542"), "Roles": .strings(["central", "peripheral"]),
    ]

    public static let device: [String: DBusValue] = [
        "Address": .string("AA:BB:CC:DD:EE:FF"), "AddressType": .string("random"), "Name": .string("Tether-1"),
        "Alias": .string("Tether-1"), "Paired": .boolean(false), "Trusted": .boolean(false),
        "Blocked": .boolean(false), "LegacyPairing": .boolean(false), "RSSI": .int16(-67),
        "Connected": .boolean(true), "UUIDs": .strings([nusService]), "Adapter": .objectPath(adapterPath),
        "ManufacturerData": .dictionary(key: .uint16, value: .variant, [.init(.uint16(0x0059), .variant(.bytes([0x01, 0x02, 0x03])))]),
        "ServicesResolved": .boolean(true),
    ]

    public static let service: [String: DBusValue] = [
        "UUID": .string(nusService), "Device": .objectPath(devicePath), "Primary": .boolean(true),
    ]

    public static let tx: [String: DBusValue] = [
        "UUID": .string(nusTX), "Service": .objectPath(servicePath), "Value": .bytes([]),
        "Notifying": .boolean(false), "Flags": .strings(["notify"]), "MTU": .uint16(247),
    ]

    public static let rx: [String: DBusValue] = [
        "UUID": .string(nusRX), "Service": .objectPath(servicePath), "Value": .bytes([]),
        "Flags": .strings(["write-without-response", "write"]), "MTU": .uint16(247),
    ]

    /// `a{sa{sv}}` as InterfacesAdded and GetManagedObjects carry it; bluetoothd
    /// lists the standard interfaces too, with no properties.
    public static func interfaces(_ name: String, _ properties: [String: DBusValue]) -> DBusValue {
        .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
            .init(.string("org.freedesktop.DBus.Introspectable"), .vardict([:])),
            .init(.string(name), .vardict(properties)),
            .init(.string("org.freedesktop.DBus.Properties"), .vardict([:])),
        ])
    }

    /// A GetManagedObjects reply body: `a{oa{sa{sv}}}`.
    public static var managedObjects: DBusValue {
        .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), [
            .init(.objectPath(adapterPath), interfaces("org.bluez.Adapter1", adapter)),
            .init(.objectPath(devicePath), interfaces("org.bluez.Device1", device)),
            .init(.objectPath(servicePath), interfaces("org.bluez.GattService1", service)),
            .init(.objectPath(txPath), interfaces("org.bluez.GattCharacteristic1", tx)),
            .init(.objectPath(rxPath), interfaces("org.bluez.GattCharacteristic1", rx)),
        ])
    }

    /// The body of a PropertiesChanged signal.
    public static func propertiesChanged(_ interface: String, _ changed: [String: DBusValue], invalidated: [String] = []) -> [DBusValue] {
        [.string(interface), .vardict(changed), .strings(invalidated)]
    }
}
