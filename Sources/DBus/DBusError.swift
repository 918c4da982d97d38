/// An error from the D-Bus layer.
///
/// `remote` carries a peer's error reply verbatim (name and message), so that
/// higher layers can classify BlueZ's errors; the other cases are raised
/// locally.
public enum DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An error reply from the peer, e.g. `org.bluez.Error.Failed` / `le-connection-abort-by-local`.
    case remote(name: String, message: String)
    /// No reply within the call's timeout.
    case timeout
    /// The connection to the bus is closed.
    case disconnected
    /// Connecting to or authenticating with the bus failed.
    case connectFailed(String)
    /// A name, path or value that libdbus would reject.
    case invalidArgument(String)
    /// A reply or message whose contents do not have the expected shape.
    case malformed(String)
    /// libdbus could not allocate memory.
    case outOfMemory
    /// The calling task was cancelled before the reply arrived.
    case cancelled

    public var description: String {
        switch self {
        case .remote(let name, let message): message.isEmpty ? name : "\(name): \(message)"
        case .timeout: "org.freedesktop.DBus.Error.NoReply: no reply within the timeout"
        case .disconnected: "the D-Bus connection is closed"
        case .connectFailed(let why): "cannot connect to D-Bus: \(why)"
        case .invalidArgument(let why): "invalid D-Bus argument: \(why)"
        case .malformed(let why): "malformed D-Bus message: \(why)"
        case .outOfMemory: "out of memory in libdbus"
        case .cancelled: "the call was cancelled"
        }
    }

    /// The D-Bus error name, as a peer would see it.
    public var name: String {
        switch self {
        case .remote(let name, _): name
        case .timeout: DBusErrorName.noReply
        case .disconnected: DBusErrorName.disconnected
        case .connectFailed: DBusErrorName.failed
        case .invalidArgument: DBusErrorName.invalidArgs
        case .malformed: DBusErrorName.invalidSignature
        case .outOfMemory: DBusErrorName.noMemory
        case .cancelled: DBusErrorName.failed
        }
    }

    /// The text without the error name (which `name` carries), so that
    /// "name: message" never names it twice.
    public var message: String {
        switch self {
        case .remote(_, let message): message
        case .timeout: "no reply within the timeout"
        default: description
        }
    }
}

/// Well-known error names of the bus itself.
public enum DBusErrorName {
    public static let failed = "org.freedesktop.DBus.Error.Failed"
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"
    public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
    public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
    public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
    public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
    public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
    public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
    public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
    public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
    public static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
    public static let matchRuleInvalid = "org.freedesktop.DBus.Error.MatchRuleInvalid"
    public static let matchRuleNotFound = "org.freedesktop.DBus.Error.MatchRuleNotFound"
}
