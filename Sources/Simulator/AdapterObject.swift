import BlueZ
import DBus

/// Adapter1 on `/org/bluez/hci0` (or the index the controller came back under).
enum AdapterObject {
    static let path: ObjectPath = "/org/bluez/hci0"

    /// `/org/bluez/NAME` for a controller named like `hci1`.
    static func path(name: String) -> ObjectPath? {
        guard name.hasPrefix("hci"), Int(name.dropFirst(3)) != nil else { return nil }
        let bluez: ObjectPath = "/org/bluez"
        return bluez.appending(name)
    }
    /// Properties.Set may change these; Powered goes through the simulator
    /// because it drops the link and stops discovery.
    static let writable: Set<String> = ["Powered", "Alias", "Discoverable", "Pairable"]

    struct Snapshot: Sendable {
        var address: String
        var powered: Bool
        var discovering: Bool
    }

    static let name = "tether-sim"

    static func interface(_ snapshot: Snapshot, simulator: Simulator) -> ExportedInterface {
        ExportedInterface(
            name: BlueZ.adapterInterface,
            methods: [
                "StartDiscovery": .init { call in
                    try await simulator.startDiscovery(client: call.sender)
                    return []
                },
                "StopDiscovery": .init { call in
                    try await simulator.stopDiscovery(client: call.sender)
                    return []
                },
                "SetDiscoveryFilter": .init(in: "a{sv}") { call in
                    guard let entries = try call.argument(0).stringKeyedDictionary else {
                        throw BlueZFault.invalidArguments()
                    }
                    try await simulator.setDiscoveryFilter(DiscoveryFilter(parsing: entries), client: call.sender)
                    return []
                },
                "GetDiscoveryFilters": .init(out: "as") { _ in
                    [.strings(DiscoveryFilter.keys.sorted())]
                },
                "RemoveDevice": .init(in: "o") { call in
                    guard let path = try call.argument(0).objectPath else { throw BlueZFault.invalidArguments() }
                    try await simulator.removeDevice(path)
                    return []
                },
            ],
            properties: [
                "Address": .string(snapshot.address),
                "AddressType": .string("public"),
                "Name": .string(name),
                "Alias": .string(name),
                // Major class Computer, minor Laptop, with a few service bits: a typical USB adapter's host.
                "Class": .uint32(0x6c_010c),
                "Powered": .boolean(snapshot.powered),
                "Discoverable": .boolean(false),
                "DiscoverableTimeout": .uint32(180),
                "Pairable": .boolean(true),
                "PairableTimeout": .uint32(0),
                "Discovering": .boolean(snapshot.discovering),
                "UUIDs": .strings([
                    "00001800-0000-1000-8000-00805f9b34fb",
                    "00001801-0000-1000-8000-00805f9b34fb",
                    "0000180a-0000-1000-8000-00805f9b34fb",
                ]),
                "Modalias": .string("usb:v1D6Bp0246d0542"),
                "Roles": .strings(["central", "peripheral"]),
            ],
            writable: writable,
            setter: { name, value in
                try await simulator.setAdapterProperty(name, value)
            }
        )
    }
}
