/// A D-Bus type, as written in a type signature.
///
/// Values carry their type so that empty arrays and dictionaries still
/// marshal with the right signature.
public indirect enum DBusType: Sendable, Hashable, CustomStringConvertible {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature
    /// A Unix file descriptor (`h`): only on connections that can pass them.
    case unixFD
    case variant
    case array(DBusType)
    case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// The type signature, e.g. `a{sv}`.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .variant: "v"
        case .array(let element): "a" + element.signature
        case .dictionary(let key, let value): "a{" + key.signature + value.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    public var description: String { signature }

    /// Basic types are the only ones allowed as dictionary keys.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// Parses one complete type from a signature such as `a{oa{sa{sv}}}`.
    public init?(signature: String) {
        var chars = Substring(signature)
        guard let parsed = DBusType.parseOne(&chars), chars.isEmpty else { return nil }
        self = parsed
    }

    /// Parses a signature holding several complete types (a message body).
    public static func parseList(_ signature: String) -> [DBusType]? {
        var chars = Substring(signature)
        var types: [DBusType] = []
        while !chars.isEmpty {
            guard let next = parseOne(&chars) else { return nil }
            types.append(next)
        }
        return types
    }

    private static func parseOne(_ chars: inout Substring, depth: Int = 0) -> DBusType? {
        // libdbus limits runs of arrays and nested structs to 32 each, not their
        // sum (`a` ×32 `(` `a` ×32 … is valid), so only a signature's length,
        // at most 255 characters, bounds its depth; a hostile string must not
        // blow the stack.
        guard depth < 255, let first = chars.popFirst() else { return nil }
        switch first {
        case "y": return .byte
        case "b": return .boolean
        case "n": return .int16
        case "q": return .uint16
        case "i": return .int32
        case "u": return .uint32
        case "x": return .int64
        case "t": return .uint64
        case "d": return .double
        case "s": return .string
        case "o": return .objectPath
        case "g": return .signature
        case "h": return .unixFD
        case "v": return .variant
        case "a":
            if chars.first == "{" {
                chars.removeFirst()
                guard let key = parseOne(&chars, depth: depth + 1), key.isBasic,
                      let value = parseOne(&chars, depth: depth + 1),
                      chars.popFirst() == "}" else { return nil }
                return .dictionary(key: key, value: value)
            }
            guard let element = parseOne(&chars, depth: depth + 1) else { return nil }
            return .array(element)
        case "(":
            var fields: [DBusType] = []
            while chars.first != ")" {
                guard let field = parseOne(&chars, depth: depth + 1) else { return nil }
                fields.append(field)
            }
            chars.removeFirst()
            return fields.isEmpty ? nil : .structure(fields)
        default:
            return nil
        }
    }
}
