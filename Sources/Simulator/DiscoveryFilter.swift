import BlueZ
import DBus

/// A client's discovery filter (Adapter1.SetDiscoveryFilter), validated as
/// bluetoothd does: unknown keys, wrong types, bad values and RSSI together
/// with Pathloss are org.bluez.Error.InvalidArguments.
struct DiscoveryFilter: Sendable, Equatable {
    var uuids: [String] = []
    var rssi: Int16?
    var pathloss: UInt16?
    var transport = "auto"
    var duplicateData = true
    var discoverable = false
    var pattern = ""

    static let keys: Set<String> = ["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"]

    init() {}

    init(parsing entries: [String: DBusValue]) throws(DBusError) {
        for (key, wrapped) in entries {
            let value = wrapped.unwrapped
            switch (key, value) {
            case ("UUIDs", _):
                guard let list = value.stringArray else { throw BlueZFault.invalidArguments() }
                uuids = try list.map { text throws(DBusError) in
                    guard let uuid = Self.normalizedUUID(text) else { throw BlueZFault.invalidArguments() }
                    return uuid
                }
            case ("RSSI", .int16(let threshold)):
                rssi = threshold
            case ("Pathloss", .uint16(let limit)):
                pathloss = limit
            case ("Transport", .string(let name)) where ["auto", "bredr", "le"].contains(name):
                transport = name
            case ("DuplicateData", .boolean(let flag)):
                duplicateData = flag
            case ("Discoverable", .boolean(let flag)):
                discoverable = flag
            case ("Pattern", .string(let prefix)):
                pattern = prefix
            default:
                throw BlueZFault.invalidArguments()
            }
        }
        if rssi != nil, pathloss != nil { throw BlueZFault.invalidArguments() }
    }

    /// Whether an LE advertisement with these properties passes the filter.
    func accepts(uuids advertised: [String], rssi seen: Int16, name: String, address: String) -> Bool {
        if transport == "bredr" { return false }
        if !uuids.isEmpty, Set(uuids).isDisjoint(with: advertised.map { $0.lowercased() }) { return false }
        if let rssi, seen < rssi { return false }
        if !pattern.isEmpty, !name.hasPrefix(pattern), !address.hasPrefix(pattern) { return false }
        return true
    }

    /// The 128-bit lowercase form of a 16-, 32- or 128-bit UUID string, or nil.
    static func normalizedUUID(_ text: String) -> String? {
        let lower = text.lowercased()
        let hexDigits = Set("0123456789abcdef")
        switch lower.count {
        case 4 where lower.allSatisfy(hexDigits.contains):
            return "0000" + lower + "-0000-1000-8000-00805f9b34fb"
        case 8 where lower.allSatisfy(hexDigits.contains):
            return lower + "-0000-1000-8000-00805f9b34fb"
        case 36:
            let groups = lower.split(separator: "-", omittingEmptySubsequences: false)
            guard groups.map(\.count) == [8, 4, 4, 4, 12], groups.allSatisfy({ $0.allSatisfy(hexDigits.contains) }) else {
                return nil
            }
            return lower
        default:
            return nil
        }
    }
}
