/// An interface that a `Bus` serves on one of its objects.
///
/// Properties are plain values held by the bus; the owner changes them with
/// `Bus.setProperty`, which also emits `PropertiesChanged`. Methods are async
/// handlers; whatever they throw is sent back as the D-Bus error.
public struct ExportedInterface: Sendable {
    /// A thrown `DBusError` goes back to the caller as is; any other error as
    /// `org.freedesktop.DBus.Error.Failed` with its description.
    public typealias Handler = @Sendable (MethodCall) async throws -> [DBusValue]
    public typealias Setter = @Sendable (_ name: String, _ value: DBusValue) async throws -> Void
    /// Reads properties whose values change too often to store and signal
    /// (counters, timestamps of the last reading): computed on every Get and
    /// GetAll, and introspected with `EmitsChangedSignal` = `false` so that
    /// clients know to ask rather than wait for PropertiesChanged.
    public typealias LiveReader = @Sendable () -> [String: DBusValue]

    public struct Method: Sendable {
        public var inSignature: String
        public var outSignature: String
        public var handler: Handler

        public init(in inSignature: String = "", out outSignature: String = "", handler: @escaping Handler) {
            self.inSignature = inSignature
            self.outSignature = outSignature
            self.handler = handler
        }
    }

    public var name: String
    public var methods: [String: Method]
    public var properties: [String: DBusValue]
    /// Property names that remote callers may `Set`; each goes through `setter`.
    public var writable: Set<String>
    public var setter: Setter?
    /// Signal names and signatures, for introspection.
    public var signals: [String: String]
    /// Read-only properties computed on demand; see `LiveReader`.
    public var live: LiveReader?

    public init(
        name: String, methods: [String: Method] = [:], properties: [String: DBusValue] = [:],
        writable: Set<String> = [], setter: Setter? = nil, signals: [String: String] = [:], live: LiveReader? = nil
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.writable = writable
        self.setter = setter
        self.signals = signals
        self.live = live
    }

    /// Stored and live properties together, live ones winning.
    public var currentProperties: [String: DBusValue] {
        guard let live else { return properties }
        return properties.merging(live()) { _, new in new }
    }
}

/// A method call handed to an exported method's handler.
public struct MethodCall: Sendable {
    public var message: Message
    public var arguments: [DBusValue] { message.body }
    /// The caller's unique bus name.
    public var sender: String { message.sender ?? "" }

    public func argument(_ index: Int) throws(DBusError) -> DBusValue {
        guard index < arguments.count else {
            throw .remote(name: DBusErrorName.invalidArgs, message: "missing argument \(index)")
        }
        return arguments[index]
    }
}

/// Well-known interface names of the D-Bus standard.
public enum StandardInterface {
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    public static let peer = "org.freedesktop.DBus.Peer"
    public static let bus = "org.freedesktop.DBus"
}
