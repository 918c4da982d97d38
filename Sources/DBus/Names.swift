import CDBus

// libdbus aborts the whole process when it is handed an invalid object path,
// interface, member or bus name. Every name that reaches libdbus is therefore
// one of these validated types, checked with libdbus's own validators.

/// A validated D-Bus object path such as `/org/bluez/hci0`.
public struct ObjectPath: Sendable, Hashable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String

    /// Returns nil when `rawValue` is not a valid object path.
    public init?(_ rawValue: String) {
        guard NameValidation.isValidPath(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    /// For literals in source code only: an invalid literal is a programming error.
    public init(stringLiteral value: String) {
        precondition(NameValidation.isValidPath(value), "invalid object path literal \(value)")
        self.rawValue = value
    }

    public static let root: ObjectPath = "/"

    public var description: String { rawValue }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Whether `self` is `ancestor` or lies below it.
    public func isDescendant(of ancestor: ObjectPath) -> Bool {
        if ancestor.rawValue == "/" || ancestor == self { return true }
        return rawValue.hasPrefix(ancestor.rawValue + "/")
    }

    /// A child path; nil if `element` is not a valid path element.
    public func appending(_ element: String) -> ObjectPath? {
        ObjectPath(rawValue == "/" ? "/" + element : rawValue + "/" + element)
    }

    /// The parent path, or nil for `/`.
    public var parent: ObjectPath? {
        guard rawValue != "/", let slash = rawValue.lastIndex(of: "/") else { return nil }
        let head = rawValue[..<slash]
        return ObjectPath(head.isEmpty ? "/" : String(head))
    }

    /// The last element (`char000b` for `…/service000a/char000b`).
    public var lastElement: String {
        rawValue.split(separator: "/").last.map(String.init) ?? ""
    }
}

/// Wraps libdbus's validators, which never abort and report through DBusError.
enum NameValidation {
    static func isValidPath(_ s: String) -> Bool { validate(s, dbus_validate_path) }
    static func isValidInterface(_ s: String) -> Bool { validate(s, dbus_validate_interface) }
    static func isValidMember(_ s: String) -> Bool { validate(s, dbus_validate_member) }
    static func isValidErrorName(_ s: String) -> Bool { validate(s, dbus_validate_error_name) }
    static func isValidBusName(_ s: String) -> Bool { validate(s, dbus_validate_bus_name) }
    static func isValidUTF8(_ s: String) -> Bool {
        // Swift strings are valid UTF-8, but D-Bus also forbids NUL, and
        // withCString would silently cut the string there.
        !s.utf8.contains(0) && validate(s, dbus_validate_utf8)
    }
    static func isValidSignature(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        return s.withCString { dbus_signature_validate($0, nil) != 0 }
    }
    /// Exactly one complete type, as a variant holds.
    static func isValidSingleSignature(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        return s.withCString { dbus_signature_validate_single($0, nil) != 0 }
    }

    private static func validate(
        _ s: String, _ validator: (UnsafePointer<CChar>?, UnsafeMutablePointer<CDBus.DBusError>?) -> dbus_bool_t
    ) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        return s.withCString { validator($0, nil) != 0 }
    }
}

/// Throws `DBusError.invalidArgument` unless every name is valid, so a bad name
/// from configuration or a peer becomes an error instead of an abort.
enum NameCheck {
    static func path(_ s: String) throws(DBusError) {
        guard NameValidation.isValidPath(s) else { throw .invalidArgument("invalid object path \"\(s)\"") }
    }
    static func interface(_ s: String) throws(DBusError) {
        guard NameValidation.isValidInterface(s) else { throw .invalidArgument("invalid interface name \"\(s)\"") }
    }
    static func member(_ s: String) throws(DBusError) {
        guard NameValidation.isValidMember(s) else { throw .invalidArgument("invalid member name \"\(s)\"") }
    }
    static func busName(_ s: String) throws(DBusError) {
        guard NameValidation.isValidBusName(s) else { throw .invalidArgument("invalid bus name \"\(s)\"") }
    }
    static func errorName(_ s: String) throws(DBusError) {
        guard NameValidation.isValidErrorName(s) else { throw .invalidArgument("invalid error name \"\(s)\"") }
    }
}
