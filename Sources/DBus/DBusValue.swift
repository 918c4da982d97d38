/// A value of the D-Bus type system.
///
/// Byte arrays (`ay`) have their own case because BlueZ moves every GATT value
/// as one, and marshalling them as a fixed array is much cheaper than element
/// by element.
public indirect enum DBusValue: Sendable, Hashable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(String)
    case variant(DBusValue)
    /// A Unix file descriptor (`h`), owned by the value (see `UnixFileDescriptor`).
    case unixFD(UnixFileDescriptor)
    case bytes([UInt8])
    /// An array whose elements all have type `element`.
    case array(element: DBusType, [DBusValue])
    /// A dictionary (`a{kv}`), kept in wire order.
    case dictionary(key: DBusType, value: DBusType, [DictionaryEntry])
    case structure([DBusValue])

    public struct DictionaryEntry: Sendable, Hashable {
        public var key: DBusValue
        public var value: DBusValue
        public init(_ key: DBusValue, _ value: DBusValue) {
            self.key = key
            self.value = value
        }
    }

    /// The value's own D-Bus type.
    public var type: DBusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .variant: .variant
        case .unixFD: .unixFD
        case .bytes: .array(.byte)
        case .array(let element, _): .array(element)
        case .dictionary(let key, let value, _): .dictionary(key: key, value: value)
        case .structure(let fields): .structure(fields.map(\.type))
        }
    }
}

// MARK: - Building values

extension DBusValue {
    /// An `a{sv}` dictionary, the shape of every property bag.
    public static func vardict(_ entries: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: .string, value: .variant,
            entries.sorted { $0.key < $1.key }.map { DictionaryEntry(.string($0.key), .variant($0.value)) }
        )
    }

    /// An `as` array.
    public static func strings(_ values: [String]) -> DBusValue {
        .array(element: .string, values.map(DBusValue.string))
    }
}

// MARK: - Reading values

extension DBusValue {
    /// The value inside any number of variant wrappers.
    public var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    public var string: String? {
        switch unwrapped {
        case .string(let s), .signature(let s): s
        case .objectPath(let p): p.rawValue
        default: nil
        }
    }

    public var objectPath: ObjectPath? {
        if case .objectPath(let p) = unwrapped { return p }
        return nil
    }

    public var bool: Bool? {
        if case .boolean(let b) = unwrapped { return b }
        return nil
    }

    /// Any integer type, widened.
    public var int64: Int64? {
        switch unwrapped {
        case .byte(let v): Int64(v)
        case .int16(let v): Int64(v)
        case .uint16(let v): Int64(v)
        case .int32(let v): Int64(v)
        case .uint32(let v): Int64(v)
        case .int64(let v): v
        case .uint64(let v): Int64(exactly: v)
        default: nil
        }
    }

    /// Any non-negative integer, widened; nil for negative values.
    public var uint64: UInt64? {
        if case .uint64(let v) = unwrapped { return v }
        return int64.flatMap { UInt64(exactly: $0) }
    }

    public var unixFD: UnixFileDescriptor? {
        if case .unixFD(let fd) = unwrapped { return fd }
        return nil
    }

    public var double: Double? {
        if case .double(let d) = unwrapped { return d }
        return nil
    }

    /// A byte array, whether it arrived as `ay` or as an array of bytes.
    public var bytes: [UInt8]? {
        switch unwrapped {
        case .bytes(let b): return b
        case .array(.byte, let elements):
            var out: [UInt8] = []
            out.reserveCapacity(elements.count)
            for case .byte(let b) in elements { out.append(b) }
            return out.count == elements.count ? out : nil
        default: return nil
        }
    }

    public var array: [DBusValue]? {
        switch unwrapped {
        case .array(_, let elements): elements
        case .bytes(let b): b.map(DBusValue.byte)
        default: nil
        }
    }

    public var stringArray: [String]? {
        guard let elements = array else { return nil }
        let strings = elements.compactMap(\.string)
        return strings.count == elements.count ? strings : nil
    }

    /// An `a{s…}` dictionary as a Swift dictionary; variant values stay wrapped
    /// so callers can tell the wire type.
    public var stringKeyedDictionary: [String: DBusValue]? {
        guard case .dictionary(_, _, let entries) = unwrapped else { return nil }
        var out: [String: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.string else { return nil }
            out[key] = entry.value
        }
        return out
    }

    /// An `a{o…}` dictionary as a Swift dictionary.
    public var objectPathKeyedDictionary: [ObjectPath: DBusValue]? {
        guard case .dictionary(_, _, let entries) = unwrapped else { return nil }
        var out: [ObjectPath: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.objectPath else { return nil }
            out[key] = entry.value
        }
        return out
    }

    public var dictionaryEntries: [DictionaryEntry]? {
        if case .dictionary(_, _, let entries) = unwrapped { return entries }
        return nil
    }
}
