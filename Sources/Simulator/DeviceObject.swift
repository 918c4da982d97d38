import BlueZ
import DBus
import Foundation

/// Device1 for the dongle, e.g. `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF`.
enum DeviceObject {
    /// The path bluetoothd derives from the adapter's and the address.
    static func path(adapter: ObjectPath, address: String) throws -> ObjectPath {
        // No Foundation search (it bridges to NSString): discovery makes a
        // path for every advertisement it reports.
        let element = "dev_" + String(address.uppercased().map { $0 == ":" ? "_" : $0 })
        guard isValidAddress(address), let path = adapter.appending(element) else {
            throw SimulatorError.invalidAddress(address)
        }
        return path
    }

    static func isValidAddress(_ address: String) -> Bool {
        let groups = address.split(separator: ":", omittingEmptySubsequences: false)
        return groups.count == 6 && groups.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    /// The services the dongle offers (Device1.UUIDs), also what it advertises.
    static let uuids = [GattDatabase.KnownUUID.nusService, GattDatabase.KnownUUID.batteryService]

    /// Nordic Semiconductor's Bluetooth SIG company identifier.
    static let nordicCompanyID: UInt16 = 0x0059
    /// Manufacturer data in the advertisement: "TE", protocol 1, firmware 0.3.
    static let manufacturerPayload: [UInt8] = [0x54, 0x45, 0x01, 0x00, 0x03]

    struct Snapshot: Sendable {
        var address: String
        var name: String
        var connected: Bool
        var rssi: Int16?
        var adapter: ObjectPath
        var paired = false
        var bonded = false
        var trusted = false
    }

    static let writable: Set<String> = ["Alias", "Trusted"]

    static func interface(_ snapshot: Snapshot, simulator: Simulator) -> ExportedInterface {
        var properties: [String: DBusValue] = [
            "Address": .string(snapshot.address.uppercased()),
            "AddressType": .string("random"),
            "Name": .string(snapshot.name),
            "Alias": .string(snapshot.name),
            "Paired": .boolean(snapshot.paired),
            "Bonded": .boolean(snapshot.bonded),
            "Trusted": .boolean(snapshot.trusted),
            "Blocked": .boolean(false),
            "LegacyPairing": .boolean(false),
            "Connected": .boolean(snapshot.connected),
            "ServicesResolved": .boolean(false),
            "UUIDs": .strings(uuids),
            "Adapter": .objectPath(snapshot.adapter),
            "ManufacturerData": .dictionary(key: .uint16, value: .variant, [
                .init(.uint16(nordicCompanyID), .variant(.bytes(manufacturerPayload)))
            ]),
        ]
        if let rssi = snapshot.rssi { properties["RSSI"] = .int16(rssi) }
        return ExportedInterface(
            name: BlueZ.deviceInterface,
            methods: [
                "Connect": .init { call in
                    try await simulator.connectDevice(client: call.sender)
                    return []
                },
                "Disconnect": .init { call in
                    try await simulator.disconnectDevice(client: call.sender)
                    return []
                },
                "Pair": .init { call in
                    try await simulator.pairDevice(client: call.sender)
                    return []
                },
            ],
            properties: properties,
            writable: writable,
            setter: { name, value in
                try await simulator.setDeviceProperty(name, value)
            }
        )
    }
}
