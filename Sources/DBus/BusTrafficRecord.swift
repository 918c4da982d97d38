import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One message an `InProcessBusDaemon` handed to a connection, as its
/// header says (and, for an error, its text): what a simulation's checks
/// read of the bus, and what its trace prints.
public struct BusTrafficRecord: Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case methodCall = "call"
        case methodReturn = "return"
        case error
        case signal
    }

    public var kind: Kind
    /// The sending connection's unique name (stamped by the daemon), or the
    /// bus driver's name.
    public var sender: String
    /// The receiving connection's unique name.
    public var receiver: String
    /// The destination as the sender addressed it (a well-known or unique
    /// name); nil for a broadcast signal.
    public var destinationName: String?
    public var path: String
    public var interface: String
    public var member: String
    public var errorName: String?
    /// An error's text (its first argument).
    public var errorMessage: String?
    public var serial: UInt32
    public var replySerial: UInt32
    /// For a PropertiesChanged of a GATT characteristic that carries its
    /// `Value` (a notification): those bytes.
    public var characteristicValue: [UInt8]?
    /// The object path a RemoveDevice call names, or that an
    /// InterfacesAdded or InterfacesRemoved signal is about (its first
    /// argument): what the simulation's checks follow of device objects.
    public var objectPathArgument: String?

    init(_ message: OpaquePointer, receiver: String) {
        func text(_ pointer: UnsafePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }
        switch dbus_message_get_type(message) {
        case CDBUS_MESSAGE_TYPE_METHOD_CALL: kind = .methodCall
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN: kind = .methodReturn
        case CDBUS_MESSAGE_TYPE_ERROR: kind = .error
        default: kind = .signal
        }
        sender = text(dbus_message_get_sender(message)) ?? ""
        self.receiver = receiver
        destinationName = text(dbus_message_get_destination(message))
        path = text(dbus_message_get_path(message)) ?? ""
        interface = text(dbus_message_get_interface(message)) ?? ""
        member = text(dbus_message_get_member(message)) ?? ""
        errorName = text(dbus_message_get_error_name(message))
        serial = dbus_message_get_serial(message)
        replySerial = dbus_message_get_reply_serial(message)
        errorMessage = nil
        characteristicValue = nil
        objectPathArgument = nil
        if kind == .signal, member == "PropertiesChanged" {
            characteristicValue = Self.characteristicValue(of: message)
        }
        if (kind == .methodCall && member == "RemoveDevice")
            || (kind == .signal && (member == "InterfacesRemoved" || member == "InterfacesAdded"))
        {
            var iterator = DBusMessageIter()
            if dbus_message_iter_init(message, &iterator) != 0, dbus_message_iter_get_arg_type(&iterator) == CDBUS_TYPE_OBJECT_PATH {
                var value: UnsafePointer<CChar>?
                dbus_message_iter_get_basic(&iterator, &value)
                objectPathArgument = text(value)
            }
        }
        if kind == .error {
            var iterator = DBusMessageIter()
            if dbus_message_iter_init(message, &iterator) != 0, dbus_message_iter_get_arg_type(&iterator) == CDBUS_TYPE_STRING {
                var value: UnsafePointer<CChar>?
                dbus_message_iter_get_basic(&iterator, &value)
                errorMessage = text(value)
            }
        }
    }

    /// `Value` from a PropertiesChanged("org.bluez.GattCharacteristic1",
    /// {…"Value": ay…}, as), read in place with libdbus's iterator.
    private static func characteristicValue(of message: OpaquePointer) -> [UInt8]? {
        var arguments = DBusMessageIter()
        guard dbus_message_iter_init(message, &arguments) != 0, dbus_message_iter_get_arg_type(&arguments) == CDBUS_TYPE_STRING
        else { return nil }
        var interface: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&arguments, &interface)
        guard let interface, strcmp(interface, "org.bluez.GattCharacteristic1") == 0, dbus_message_iter_next(&arguments) != 0,
              dbus_message_iter_get_arg_type(&arguments) == CDBUS_TYPE_ARRAY
        else { return nil }
        var entries = DBusMessageIter()
        dbus_message_iter_recurse(&arguments, &entries)
        while dbus_message_iter_get_arg_type(&entries) == CDBUS_TYPE_DICT_ENTRY {
            var entry = DBusMessageIter()
            dbus_message_iter_recurse(&entries, &entry)
            var key: UnsafePointer<CChar>?
            dbus_message_iter_get_basic(&entry, &key)
            if let key, strcmp(key, "Value") == 0, dbus_message_iter_next(&entry) != 0 {
                var variant = DBusMessageIter()
                dbus_message_iter_recurse(&entry, &variant)
                guard dbus_message_iter_get_arg_type(&variant) == CDBUS_TYPE_ARRAY else { return nil }
                var bytes = DBusMessageIter()
                dbus_message_iter_recurse(&variant, &bytes)
                var pointer: UnsafeRawPointer?
                var count: Int32 = 0
                withUnsafeMutablePointer(to: &pointer) { dbus_message_iter_get_fixed_array(&bytes, $0, &count) }
                guard let pointer, count > 0 else { return [] }
                return Array(UnsafeRawBufferPointer(start: pointer, count: Int(count)))
            }
            dbus_message_iter_next(&entries)
        }
        return nil
    }

    public var description: String {
        switch kind {
        case .methodCall: "\(sender) → \(receiver) call \(interface).\(member) \(path) #\(serial)"
        case .methodReturn: "\(sender) → \(receiver) return #\(replySerial)"
        case .error: "\(sender) → \(receiver) error #\(replySerial) \(errorName ?? ""): \(errorMessage ?? "")"
        case .signal: "\(sender) → \(receiver) signal \(interface).\(member) \(path)"
        }
    }
}
