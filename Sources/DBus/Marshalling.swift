import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Converts between `DBusValue` and libdbus's message iterators.
///
/// Appending validates everything libdbus would otherwise abort on (strings
/// with NUL, mismatched container element types, invalid container types) or
/// would marshal into a message that it, and the bus, then reject (signatures
/// over 255 bytes, nesting too deep); reading trusts libdbus, which has
/// already validated every message that came off the wire.
enum Marshalling {
    /// libdbus's limit on the containers (variants included) around any value
    /// of a body: 2 × DBUS_MAXIMUM_TYPE_RECURSION_DEPTH.
    static let maximumDepth = 64

    static func append(_ values: [DBusValue], to message: OpaquePointer) throws(DBusError) {
        // A value's type can be one D-Bus has no signature for (an empty struct,
        // a dictionary keyed by a container), too deep or too long: libdbus's own
        // validator decides, before libdbus sees any of it.
        let signature = values.map(\.type.signature).joined()
        guard NameValidation.isValidSignature(signature) else {
            throw .invalidArgument("no valid D-Bus signature for a body of \(signature)")
        }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for value in values {
            try append(value, to: &iter, depth: 0)
        }
    }

    static func readBody(of message: OpaquePointer) throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != CDBUS_TYPE_INVALID {
            values.append(try read(&iter))
            dbus_message_iter_next(&iter)
        }
        return values
    }

    // MARK: Appending

    /// `depth`: the containers around `value`.
    private static func append(_ value: DBusValue, to iter: inout DBusMessageIter, depth: Int) throws(DBusError) {
        switch value {
        case .byte(var v): try appendBasic(CDBUS_TYPE_BYTE, &v, &iter)
        case .boolean(let b):
            var v: dbus_bool_t = b ? 1 : 0
            try appendBasic(CDBUS_TYPE_BOOLEAN, &v, &iter)
        case .int16(var v): try appendBasic(CDBUS_TYPE_INT16, &v, &iter)
        case .uint16(var v): try appendBasic(CDBUS_TYPE_UINT16, &v, &iter)
        case .int32(var v): try appendBasic(CDBUS_TYPE_INT32, &v, &iter)
        case .uint32(var v): try appendBasic(CDBUS_TYPE_UINT32, &v, &iter)
        case .int64(var v): try appendBasic(CDBUS_TYPE_INT64, &v, &iter)
        case .uint64(var v): try appendBasic(CDBUS_TYPE_UINT64, &v, &iter)
        case .double(var v): try appendBasic(CDBUS_TYPE_DOUBLE, &v, &iter)
        case .string(let s):
            guard NameValidation.isValidUTF8(s) else { throw .invalidArgument("string with a NUL byte") }
            try appendString(CDBUS_TYPE_STRING, s, &iter)
        case .objectPath(let p):
            try appendString(CDBUS_TYPE_OBJECT_PATH, p.rawValue, &iter)
        case .unixFD(let descriptor):
            // libdbus duplicates the descriptor; ours stays with its owner.
            guard var fd = descriptor.borrowed else { throw .invalidArgument("a file descriptor that was already taken") }
            guard dbus_message_iter_append_basic(&iter, CDBUS_TYPE_UNIX_FD, &fd) != 0 else {
                throw .invalidArgument("libdbus cannot duplicate file descriptor \(fd)")
            }
        case .signature(let s):
            guard NameValidation.isValidSignature(s) else { throw .invalidArgument("invalid signature \"\(s)\"") }
            try appendString(CDBUS_TYPE_SIGNATURE, s, &iter)
        case .variant(let inner):
            // The body's signature does not show what a variant holds.
            let signature = inner.type.signature
            guard NameValidation.isValidSingleSignature(signature) else {
                throw .invalidArgument("no valid D-Bus signature for a variant of \(signature)")
            }
            try container(CDBUS_TYPE_VARIANT, signature: signature, &iter, depth: depth) { (sub) throws(DBusError) in
                try append(inner, to: &sub, depth: depth + 1)
            }
        case .bytes(let bytes):
            try container(CDBUS_TYPE_ARRAY, signature: "y", &iter, depth: depth) { (sub) throws(DBusError) in
                let ok = bytes.withUnsafeBufferPointer { buffer -> dbus_bool_t in
                    // libdbus wants a pointer to the pointer of the first element,
                    // and a valid pointer even for zero elements.
                    var base: UnsafePointer<UInt8>? = buffer.baseAddress
                    var empty: UInt8 = 0
                    return withUnsafeMutablePointer(to: &empty) { emptyPointer in
                        if base == nil { base = UnsafePointer(emptyPointer) }
                        return dbus_message_iter_append_fixed_array(&sub, CDBUS_TYPE_BYTE, &base, Int32(buffer.count))
                    }
                }
                guard ok != 0 else { throw .outOfMemory }
            }
        case .array(let element, let elements):
            if element == .byte, let bytes = value.bytes {
                try append(.bytes(bytes), to: &iter, depth: depth)
                return
            }
            try container(CDBUS_TYPE_ARRAY, signature: element.signature, &iter, depth: depth) { (sub) throws(DBusError) in
                for item in elements {
                    guard item.type == element else {
                        throw .invalidArgument("array of \(element) holds a \(item.type)")
                    }
                    try append(item, to: &sub, depth: depth + 1)
                }
            }
        case .dictionary(let keyType, let valueType, let entries):
            guard keyType.isBasic else { throw .invalidArgument("dictionary key type \(keyType) is not basic") }
            let entrySignature = "{" + keyType.signature + valueType.signature + "}"
            try container(CDBUS_TYPE_ARRAY, signature: entrySignature, &iter, depth: depth) { (sub) throws(DBusError) in
                for entry in entries {
                    guard entry.key.type == keyType, entry.value.type == valueType else {
                        throw .invalidArgument("dictionary \(entrySignature) holds {\(entry.key.type)\(entry.value.type)}")
                    }
                    try container(CDBUS_TYPE_DICT_ENTRY, signature: nil, &sub, depth: depth + 1) { (pair) throws(DBusError) in
                        try append(entry.key, to: &pair, depth: depth + 2)
                        try append(entry.value, to: &pair, depth: depth + 2)
                    }
                }
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidArgument("empty structure") }
            try container(CDBUS_TYPE_STRUCT, signature: nil, &iter, depth: depth) { (sub) throws(DBusError) in
                for field in fields { try append(field, to: &sub, depth: depth + 1) }
            }
        }
    }

    private static func appendBasic<T: BitwiseCopyable>(_ type: Int32, _ value: inout T, _ iter: inout DBusMessageIter) throws(DBusError) {
        guard dbus_message_iter_append_basic(&iter, type, &value) != 0 else { throw .outOfMemory }
    }

    private static func appendString(_ type: Int32, _ s: String, _ iter: inout DBusMessageIter) throws(DBusError) {
        let ok = s.withCString { cString -> dbus_bool_t in
            var pointer: UnsafePointer<CChar>? = cString
            return dbus_message_iter_append_basic(&iter, type, &pointer)
        }
        guard ok != 0 else { throw .outOfMemory }
    }

    /// Opens a container around values at `depth + 1`.
    private static func container(
        _ type: Int32, signature: String?, _ iter: inout DBusMessageIter, depth: Int,
        _ body: (inout DBusMessageIter) throws(DBusError) -> Void
    ) throws(DBusError) {
        guard depth < maximumDepth else { throw .invalidArgument("values nested more than \(maximumDepth) containers deep") }
        var sub = DBusMessageIter()
        let opened: dbus_bool_t
        if let signature {
            opened = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) }
        } else {
            opened = dbus_message_iter_open_container(&iter, type, nil, &sub)
        }
        guard opened != 0 else { throw .outOfMemory }
        do {
            try body(&sub)
        } catch {
            dbus_message_iter_abandon_container(&iter, &sub)
            throw error
        }
        guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .outOfMemory }
    }

    // MARK: Reading

    private static func read(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case CDBUS_TYPE_BYTE: return .byte(readBasic(&iter, UInt8(0)))
        case CDBUS_TYPE_BOOLEAN: return .boolean(readBasic(&iter, dbus_bool_t(0)) != 0)
        case CDBUS_TYPE_INT16: return .int16(readBasic(&iter, Int16(0)))
        case CDBUS_TYPE_UINT16: return .uint16(readBasic(&iter, UInt16(0)))
        case CDBUS_TYPE_INT32: return .int32(readBasic(&iter, Int32(0)))
        case CDBUS_TYPE_UINT32: return .uint32(readBasic(&iter, UInt32(0)))
        case CDBUS_TYPE_INT64: return .int64(readBasic(&iter, Int64(0)))
        case CDBUS_TYPE_UINT64: return .uint64(readBasic(&iter, UInt64(0)))
        case CDBUS_TYPE_DOUBLE: return .double(readBasic(&iter, Double(0)))
        case CDBUS_TYPE_STRING: return .string(readString(&iter))
        case CDBUS_TYPE_SIGNATURE: return .signature(readString(&iter))
        case CDBUS_TYPE_OBJECT_PATH:
            let text = readString(&iter)
            guard let path = ObjectPath(text) else { throw .malformed("object path \"\(text)\"") }
            return .objectPath(path)
        case CDBUS_TYPE_VARIANT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try read(&sub))
        case CDBUS_TYPE_STRUCT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != CDBUS_TYPE_INVALID {
                fields.append(try read(&sub))
                dbus_message_iter_next(&sub)
            }
            return .structure(fields)
        case CDBUS_TYPE_ARRAY:
            return try readArray(&iter)
        case CDBUS_TYPE_UNIX_FD:
            // libdbus hands out a duplicate, owned from here on by the value
            // (closed with it unless someone takes it).
            let fd = readBasic(&iter, Int32(-1))
            guard fd >= 0 else { throw .malformed("a file descriptor libdbus could not duplicate") }
            return .unixFD(UnixFileDescriptor(owning: fd))
        default:
            throw .malformed("unknown type code \(type)")
        }
    }

    private static func readArray(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        guard let signaturePointer = dbus_message_iter_get_signature(&iter) else { throw .outOfMemory }
        let signature = String(cString: signaturePointer)
        dbus_free(signaturePointer)
        guard let arrayType = DBusType(signature: signature) else { throw .malformed("signature \(signature)") }

        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        switch arrayType {
        case .array(.byte):
            var pointer: UnsafePointer<UInt8>?
            var count: Int32 = 0
            withUnsafeMutablePointer(to: &pointer) { p in
                dbus_message_iter_get_fixed_array(&sub, p, &count)
            }
            guard let pointer, count > 0 else { return .bytes([]) }
            return .bytes(Array(UnsafeBufferPointer(start: pointer, count: Int(count))))
        case .dictionary(let keyType, let valueType):
            var entries: [DBusValue.DictionaryEntry] = []
            while dbus_message_iter_get_arg_type(&sub) == CDBUS_TYPE_DICT_ENTRY {
                var pair = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &pair)
                let key = try read(&pair)
                dbus_message_iter_next(&pair)
                let value = try read(&pair)
                entries.append(.init(key, value))
                dbus_message_iter_next(&sub)
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .array(let element):
            var elements: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != CDBUS_TYPE_INVALID {
                elements.append(try read(&sub))
                dbus_message_iter_next(&sub)
            }
            return .array(element: element, elements)
        default:
            throw .malformed("array signature \(signature)")
        }
    }

    private static func readBasic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ initial: T) -> T {
        var value = initial
        dbus_message_iter_get_basic(&iter, &value)
        return value
    }

    private static func readString(_ iter: inout DBusMessageIter) -> String {
        var pointer: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iter, &pointer)
        return pointer.map { String(cString: $0) } ?? ""
    }
}
