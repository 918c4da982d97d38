import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DBus

/// org.bluez.Adapter1, as far as Tether needs it.
public struct Adapter: Sendable, Equatable {
    public var path: ObjectPath
    public var address: String
    public var name: String?
    public var powered: Bool
    public var discovering: Bool

    public init(path: ObjectPath, _ properties: ObjectTree.Properties) {
        self.path = path
        address = properties["Address"]?.string ?? ""
        name = properties["Name"]?.string
        powered = properties["Powered"]?.bool ?? false
        discovering = properties["Discovering"]?.bool ?? false
    }

    /// `hci0` for `/org/bluez/hci0`.
    public var interfaceName: String { path.lastElement }
}

/// org.bluez.Device1.
public struct Device: Sendable, Equatable {
    public var path: ObjectPath
    public var adapter: ObjectPath?
    public var address: String
    /// "public" or "random" (BlueZ's AddressType); nil if not given.
    public var addressType: String?
    public var name: String?
    public var alias: String?
    public var connected: Bool
    public var servicesResolved: Bool
    /// Paired or Bonded: bluetoothd holds keys for it.
    public var bonded: Bool
    /// Present only while discovery sees the device advertising.
    public var rssi: Int?
    public var uuids: [String]
    /// Company identifier → data.
    public var manufacturerData: [UInt16: [UInt8]]

    public init(path: ObjectPath, _ properties: ObjectTree.Properties) {
        self.path = path
        adapter = properties["Adapter"]?.objectPath
        address = properties["Address"]?.string?.uppercased() ?? ""
        addressType = properties["AddressType"]?.string
        name = properties["Name"]?.string
        alias = properties["Alias"]?.string
        connected = properties["Connected"]?.bool ?? false
        servicesResolved = properties["ServicesResolved"]?.bool ?? false
        bonded = (properties["Paired"]?.bool ?? false) || (properties["Bonded"]?.bool ?? false)
        rssi = properties["RSSI"]?.int64.map { Int($0) }
        uuids = (properties["UUIDs"]?.stringArray ?? []).map { $0.lowercased() }
        var data: [UInt16: [UInt8]] = [:]
        for entry in properties["ManufacturerData"]?.dictionaryEntries ?? [] {
            if let key = entry.key.int64, let company = UInt16(exactly: key), let bytes = entry.value.bytes {
                data[company] = bytes
            }
        }
        manufacturerData = data
    }

    /// BlueZ's object path for a device address under an adapter:
    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF`. Byte by byte: an address is
    /// ASCII, and anything else is left for `appending` to refuse.
    public static func path(adapter: ObjectPath, address: String) -> ObjectPath? {
        let element = address.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: ":"): UInt8(ascii: "_")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - (UInt8(ascii: "a") - UInt8(ascii: "A"))
            default: byte
            }
        }
        return adapter.appending("dev_" + String(decoding: element, as: UTF8.self))
    }
}

/// org.bluez.GattCharacteristic1.
public struct GattCharacteristic: Sendable, Equatable {
    public var path: ObjectPath
    public var uuid: String
    public var service: ObjectPath?
    public var flags: [String]
    public var notifying: Bool
    /// Whether a client holds the notifications' socket (AcquireNotify); nil
    /// where bluetoothd does not export the property: no `notify` flag, or a
    /// BlueZ without AcquireNotify.
    public var notifyAcquired: Bool?

    public init(path: ObjectPath, _ properties: ObjectTree.Properties) {
        self.path = path
        uuid = properties["UUID"]?.string?.lowercased() ?? ""
        service = properties["Service"]?.objectPath
        flags = properties["Flags"]?.stringArray ?? []
        notifying = properties["Notifying"]?.bool ?? false
        notifyAcquired = properties["NotifyAcquired"]?.bool
    }

    /// AcquireNotify can work here: bluetoothd exports NotifyAcquired exactly
    /// for characteristics with the `notify` flag (not for `indicate` only).
    public var canAcquireNotify: Bool { notifyAcquired != nil && flags.contains("notify") }

    public var canNotify: Bool { flags.contains("notify") || flags.contains("indicate") }
    public var canRead: Bool { flags.contains("read") }
    public var canWriteCommand: Bool { flags.contains("write-without-response") }
    public var canWriteRequest: Bool { flags.contains("write") }
}

/// How WriteValue asks BlueZ to write.
public enum WriteType: String, Sendable {
    /// Write without response (ATT Write Command).
    case command
    /// Write with response (ATT Write Request).
    case request
}
