import DBus
import FuzzSupport

// MARK: - Comparing

/// Whether two values are the same, doubles compared bit for bit: `==` says a
/// NaN differs from itself, but a round trip must keep even NaN payloads.
public func same(_ a: DBusValue, _ b: DBusValue) -> Bool {
    switch (a, b) {
    case (.double(let x), .double(let y)):
        return x.bitPattern == y.bitPattern
    case (.variant(let x), .variant(let y)):
        return same(x, y)
    case (.array(let t1, let e1), .array(let t2, let e2)):
        return t1 == t2 && same(e1, e2)
    case (.dictionary(let k1, let v1, let e1), .dictionary(let k2, let v2, let e2)):
        return k1 == k2 && v1 == v2 && e1.count == e2.count
            && zip(e1, e2).allSatisfy { same($0.key, $1.key) && same($0.value, $1.value) }
    case (.structure(let f1), .structure(let f2)):
        return same(f1, f2)
    default:
        return a == b
    }
}

public func same(_ a: [DBusValue], _ b: [DBusValue]) -> Bool {
    a.count == b.count && zip(a, b).allSatisfy { same($0, $1) }
}

// MARK: - Tables

/// Strings that matter to BlueZ and its clients, one byte each in the encoding:
/// mutations then swap one name for another instead of garbling it.
public let knownStrings: [String] = [
    "org.bluez.Adapter1", "org.bluez.Device1", "org.bluez.GattService1", "org.bluez.GattCharacteristic1",
    "org.bluez.GattDescriptor1", "org.bluez.Battery1", "org.freedesktop.DBus.Properties",
    "org.freedesktop.DBus.Introspectable", "org.bluez.", "",
    "Address", "AddressType", "Name", "Alias", "Class", "Powered", "Discoverable", "Pairable", "Discovering",
    "UUIDs", "Modalias", "Roles", "Connected", "ServicesResolved", "RSSI", "TxPower", "ManufacturerData",
    "ServiceData", "Paired", "Trusted", "Adapter", "Appearance", "UUID", "Service", "Value", "Notifying",
    "Flags", "MTU", "Primary", "Device", "Characteristic", "Handle",
    "notify", "indicate", "read", "write", "write-without-response",
    "AA:BB:CC:DD:EE:FF", "aa:bb:cc:dd:ee:ff", "00:1A:7D:DA:71:13", "public", "random", "Tether-1", "hci0",
    "6e400001-b5a3-f393-e0a9-e50e24dcca9e", "6e400002-b5a3-f393-e0a9-e50e24dcca9e",
    "6e400003-b5a3-f393-e0a9-e50e24dcca9e", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E",
    "00002a19-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb",
]

public let knownPaths: [ObjectPath] = [
    "/", "/org", "/org/bluez", "/org/bluez/hci0", "/org/bluez/hci1",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000b",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000b/desc000d",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service000a/char000e",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010/char0011",
    "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FFx",
    "/org/bluez/hci0/dev_00_1A_7D_DA_71_13",
    "/org/bluez/hci0/dev_00_1A_7D_DA_71_13/service0001/char0002",
    "/org/bluez/hci1/dev_AA_BB_CC_DD_EE_FF",
    "/org/bluez/hci1/dev_AA_BB_CC_DD_EE_FF/service000a/char000b",
]

public let knownSignatures = ["", "s", "a{sv}", "ay", "o", "as", "v", "(ii)", "a{oa{sa{sv}}}", "aay"]

private let basicTypes: [DBusType] = [
    .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
]

private enum Code {
    static let variant: UInt8 = 12, array: UInt8 = 13, dictionary: UInt8 = 14, structure: UInt8 = 15
    static let firstKnownString: UInt8 = 0xC0, firstKnownPath: UInt8 = 0xE0
    /// A dictionary key byte from here on asks for any type (invalid unless basic).
    static let anyKey: UInt8 = 0xF0
}

// MARK: - Generating

/// Builds typed D-Bus values from fuzzer bytes; `ValueWriter` writes the
/// bytes that read back as a given value (for seeds).
///
/// A type is one code byte (`code % 16`: 0–11 the basic types, 12 variant,
/// 13 array, 14 dictionary, 15 struct) followed by what the container needs.
/// Values follow their type: fixed-size numbers little-endian, strings and
/// paths as a length byte and bytes (or one byte naming a known one), arrays
/// and dictionaries as a count byte and the elements.
public struct ValueGenerator {
    public struct Options: Sendable {
        /// Containers around the deepest value (arrays and dictionaries count twice, as in libdbus).
        public var maxDepth: Int
        /// Also make what D-Bus forbids: empty structs, non-basic dictionary keys,
        /// strings with NUL. The binding must refuse those, not crash.
        public var invalid: Bool

        public init(maxDepth: Int, invalid: Bool) {
            self.maxDepth = maxDepth
            self.invalid = invalid
        }
    }

    public var input: FuzzInput
    public let options: Options
    /// Values left to make: bounds the work per input whatever the counts say.
    private var budget = 4096

    public init(_ input: FuzzInput, options: Options) {
        self.input = input
        self.options = options
    }

    public mutating func typedValue(depth: Int = 0) -> DBusValue {
        let type = type(depth: depth)
        return value(of: type, depth: depth)
    }

    public mutating func type(depth: Int = 0) -> DBusType {
        let code = input.byte()
        guard depth < options.maxDepth else { return basicTypes[Int(code) % basicTypes.count] }
        switch code % 16 {
        case Code.variant:
            return .variant
        case Code.array:
            return .array(type(depth: depth + 1))
        case Code.dictionary:
            let keyCode = input.byte()
            let key = options.invalid && keyCode >= Code.anyKey ? type(depth: depth + 2) : basicTypes[Int(keyCode) % basicTypes.count]
            return .dictionary(key: key, value: type(depth: depth + 2))
        case Code.structure:
            let count = Int(input.byte()) % 5
            return .structure((0..<(options.invalid ? count : max(count, 1))).map { _ in type(depth: depth + 1) })
        default:
            return basicTypes[Int(code % 16)]
        }
    }

    public mutating func value(of type: DBusType, depth: Int = 0) -> DBusValue {
        budget -= 1
        switch type {
        case .byte: return .byte(input.byte())
        case .boolean: return .boolean(input.byte() & 1 == 1)
        case .int16: return .int16(input.integer())
        case .uint16: return .uint16(input.integer())
        case .int32: return .int32(input.integer())
        case .uint32: return .uint32(input.integer())
        case .int64: return .int64(input.integer())
        case .uint64: return .uint64(input.integer())
        case .double: return .double(Double(bitPattern: input.integer()))
        case .string: return .string(string())
        case .objectPath: return .objectPath(path())
        case .signature: return .signature(knownSignatures[Int(input.byte()) % knownSignatures.count])
        // Never asked for: not in basicTypes. A descriptor has no wire bytes
        // (the binding refuses it there), and wire bytes are what these targets compare.
        case .unixFD: return .uint32(input.integer())
        case .variant: return .variant(typedValue(depth: depth + 1))
        case .array(.byte):
            return .bytes(input.bytes(Int(input.byte())))
        case .array(let element):
            return .array(element: element, (0..<count()).map { _ in value(of: element, depth: depth + 1) })
        case .dictionary(let key, let valueType):
            return .dictionary(key: key, value: valueType, (0..<count()).map { _ in
                DBusValue.DictionaryEntry(value(of: key, depth: depth + 2), value(of: valueType, depth: depth + 2))
            })
        case .structure(let fields):
            return .structure(fields.map { value(of: $0, depth: depth + 1) })
        }
    }

    private mutating func count() -> Int {
        let wanted = Int(input.byte()) % 16
        return budget > 0 ? min(wanted, input.remaining + 1) : 0
    }

    public mutating func string() -> String {
        let code = input.byte()
        if code >= Code.firstKnownString {
            return knownStrings[Int(code - Code.firstKnownString) % knownStrings.count]
        }
        let raw = input.bytes(Int(code))
        return String(decoding: options.invalid ? raw : raw.filter { $0 != 0 }, as: UTF8.self)
    }

    public mutating func path() -> ObjectPath {
        let code = input.byte()
        if code >= Code.firstKnownPath {
            return knownPaths[Int(code - Code.firstKnownPath) % knownPaths.count]
        }
        return ObjectPath(String(decoding: input.bytes(Int(code)), as: UTF8.self)) ?? .root
    }
}

/// Writes the bytes `ValueGenerator` reads back as the given types and values.
public struct ValueWriter {
    public var output = FuzzOutput()

    public init() {}

    public mutating func typedValue(_ value: DBusValue) {
        type(value.type)
        self.value(value)
    }

    public mutating func type(_ type: DBusType) {
        switch type {
        case .variant: output.byte(Code.variant)
        case .array(let element):
            output.byte(Code.array)
            self.type(element)
        case .dictionary(let key, let value):
            output.byte(Code.dictionary)
            output.byte(UInt8(basicTypes.firstIndex(of: key) ?? 0))
            self.type(value)
        case .structure(let fields):
            output.byte(Code.structure)
            output.byte(UInt8(fields.count % 5))
            fields.forEach { self.type($0) }
        default:
            output.byte(UInt8(basicTypes.firstIndex(of: type) ?? 0))
        }
    }

    public mutating func value(_ value: DBusValue) {
        switch value {
        case .byte(let v): output.byte(v)
        case .boolean(let v): output.byte(v ? 1 : 0)
        case .int16(let v): output.integer(v)
        case .uint16(let v): output.integer(v)
        case .int32(let v): output.integer(v)
        case .uint32(let v): output.integer(v)
        case .int64(let v): output.integer(v)
        case .uint64(let v): output.integer(v)
        case .double(let v): output.integer(v.bitPattern)
        case .string(let s): string(s)
        case .objectPath(let p): path(p)
        case .signature(let s): output.byte(UInt8(knownSignatures.firstIndex(of: s) ?? 0))
        case .unixFD: output.byte(0)  // never generated (see value(of:))
        case .variant(let inner): typedValue(inner)
        case .bytes(let bytes):
            output.byte(UInt8(min(bytes.count, 255)))
            output.bytes(bytes.prefix(255))
        case .array(_, let elements):
            output.byte(UInt8(min(elements.count, 15)))
            elements.prefix(15).forEach { self.value($0) }
        case .dictionary(_, _, let entries):
            output.byte(UInt8(min(entries.count, 15)))
            for entry in entries.prefix(15) {
                self.value(entry.key)
                self.value(entry.value)
            }
        case .structure(let fields):
            fields.forEach { self.value($0) }
        }
    }

    public mutating func string(_ text: String) {
        if let index = knownStrings.firstIndex(of: text) {
            output.byte(Code.firstKnownString + UInt8(index))
        } else {
            let utf8 = Array(text.utf8.prefix(Int(Code.firstKnownString) - 1))
            output.byte(UInt8(utf8.count))
            output.bytes(utf8)
        }
    }

    public mutating func path(_ path: ObjectPath) {
        if let index = knownPaths.firstIndex(of: path) {
            output.byte(Code.firstKnownPath + UInt8(index))
        } else {
            let utf8 = Array(path.rawValue.utf8.prefix(Int(Code.firstKnownPath) - 1))
            output.byte(UInt8(utf8.count))
            output.bytes(utf8)
        }
    }
}
