import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An incoming signal before it is decoded, for a fast path that needs one
/// or two fields of a hot signal without building `DBusValue` trees.
///
/// Valid only during the call that receives it (the interceptor, or the
/// bus's check of a signal against its match rules): it borrows libdbus's
/// message, which is freed afterwards. Its checks read the header, and at
/// most the first argument, without decoding the body.
public struct RawSignal: SignalFields {
    let raw: OpaquePointer

    public func hasPath(_ path: String) -> Bool { dbus_message_has_path(raw, path) != 0 }
    public func hasSender(_ sender: String) -> Bool { dbus_message_has_sender(raw, sender) != 0 }
    public func `is`(interface: String, member: String) -> Bool { dbus_message_is_signal(raw, interface, member) != 0 }

    public var isSignal: Bool { dbus_message_get_type(raw) == CDBUS_MESSAGE_TYPE_SIGNAL }
    public func hasInterface(_ interface: String) -> Bool { dbus_message_has_interface(raw, interface) != 0 }
    public func hasMember(_ member: String) -> Bool { dbus_message_has_member(raw, member) != 0 }
    public func hasSignature(_ signature: String) -> Bool { dbus_message_has_signature(raw, signature) != 0 }

    public func isInPathNamespace(_ namespace: String) -> Bool {
        guard let path = dbus_message_get_path(raw) else { return false }
        if namespace == "/" { return true }
        // `namespace` itself, or `namespace/…`: compared in place, no string made of the path.
        return namespace.withCString { prefix in
            let count = strlen(prefix)
            guard strncmp(path, prefix, count) == 0 else { return false }
            let next = path[count]
            return next == 0 || next == CChar(UInt8(ascii: "/"))
        }
    }

    public func hasFirstStringArgument(_ value: String) -> Bool {
        var iterator = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iterator) != 0,
              dbus_message_iter_get_arg_type(&iterator) == CDBUS_TYPE_STRING
        else { return false }
        var first: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iterator, &first)
        guard let first else { return false }
        return strcmp(first, value) == 0
    }

    /// Whether libdbus itself made this message (its `Disconnected`): every
    /// message from the bus carries the sender the bus daemon stamped on it.
    var isLocal: Bool {
        dbus_message_get_sender(raw) == nil
            && dbus_message_is_signal(raw, "org.freedesktop.DBus.Local", "Disconnected") != 0
    }

    /// For `org.freedesktop.DBus.Properties.PropertiesChanged(s, a{sv}, as)`
    /// on `interface` whose changes are exactly one property `name` holding a
    /// byte array (`ay`) and nothing invalidated: the bytes. Nil for any other
    /// shape, which the caller then handles on the general path.
    public func onlyByteArrayProperty(interface: String, name: String) -> [UInt8]? {
        var top = DBusMessageIter()
        guard dbus_message_iter_init(raw, &top) != 0, dbus_message_iter_get_arg_type(&top) == CDBUS_TYPE_STRING else {
            return nil
        }
        var interfaceName: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&top, &interfaceName)
        guard let interfaceName, strcmp(interfaceName, interface) == 0, dbus_message_iter_next(&top) != 0,
              dbus_message_iter_get_arg_type(&top) == CDBUS_TYPE_ARRAY
        else { return nil }
        var dict = DBusMessageIter()
        dbus_message_iter_recurse(&top, &dict)
        guard dbus_message_iter_get_arg_type(&dict) == CDBUS_TYPE_DICT_ENTRY else { return nil }
        var entry = DBusMessageIter()
        dbus_message_iter_recurse(&dict, &entry)
        guard dbus_message_iter_get_arg_type(&entry) == CDBUS_TYPE_STRING else { return nil }
        var key: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&entry, &key)
        guard let key, strcmp(key, name) == 0, dbus_message_iter_next(&entry) != 0,
              dbus_message_iter_get_arg_type(&entry) == CDBUS_TYPE_VARIANT
        else { return nil }
        var variant = DBusMessageIter()
        dbus_message_iter_recurse(&entry, &variant)
        guard dbus_message_iter_get_arg_type(&variant) == CDBUS_TYPE_ARRAY,
              dbus_message_iter_get_element_type(&variant) == CDBUS_TYPE_BYTE
        else { return nil }
        // One property only: a Value flushed together with other changes
        // (Notifying=true right after StartNotify) takes the general path.
        guard dbus_message_iter_next(&dict) == 0 else { return nil }
        // Nothing invalidated.
        guard dbus_message_iter_next(&top) != 0, dbus_message_iter_get_arg_type(&top) == CDBUS_TYPE_ARRAY else { return nil }
        var invalidated = DBusMessageIter()
        dbus_message_iter_recurse(&top, &invalidated)
        guard dbus_message_iter_get_arg_type(&invalidated) == CDBUS_TYPE_INVALID else { return nil }
        var bytes = DBusMessageIter()
        dbus_message_iter_recurse(&variant, &bytes)
        var base: UnsafeMutableRawPointer?
        var count: Int32 = 0
        // get_fixed_array on an empty array leaves base nil with count 0.
        withUnsafeMutablePointer(to: &base) { pointer in
            dbus_message_iter_get_fixed_array(&bytes, pointer, &count)
        }
        guard count > 0, let base else { return [] }
        return Array(UnsafeRawBufferPointer(start: base, count: Int(count)))
    }
}
