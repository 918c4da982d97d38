import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A D-Bus match rule for signals (see the D-Bus specification, "Match Rules"),
/// and the local check that decides whether a received signal is believed.
///
/// The bus daemon routes broadcast signals by these rules, but it delivers a
/// signal that names this connection as its destination whatever the rules
/// say, and on the system bus every user may send signals (Debian's
/// `system.conf`: `<allow send_type="signal"/>`). So the bus daemon's routing
/// proves nothing; only the sender field, which dbus-daemon stamps on every
/// message, does. The connection applies each rule again locally, on the
/// header alone, before the body is read, and a signal no rule admits is
/// dropped unread (GLib's CVE-2024-34397 was this hole).
///
/// What `sender` demands of a signal's stamped sender:
/// - `org.freedesktop.DBus`: the bus driver itself; no client can own that name;
/// - a unique name (`:1.42`): exactly that connection;
/// - any other well-known name (`org.bluez`): the name's current unique
///   owner, as the bus driver says it is (`GetNameOwner`, then its own
///   `NameOwnerChanged` signals): never a signal's say-so, and nothing while
///   the name has no owner or its owner is not known yet;
/// - nil: anyone on the bus. Only for tests and development tools; the
///   product's rules all name a sender.
///
/// `signature`, when set, is checked locally too (match rules have no such
/// key): a signal whose body is not of the expected shape is dropped before
/// it is decoded.
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    public var arg0: String?
    /// The body's signature a matching signal must have (local only).
    public var signature: String?

    public init(
        sender: String? = nil, interface: String? = nil, member: String? = nil,
        path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil, arg0: String? = nil, signature: String? = nil
    ) {
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arg0 = arg0
        self.signature = signature
    }

    /// Whose signals a rule believes, from its `sender`.
    public enum Sender: Sendable, Hashable {
        case anyone
        case busDriver
        case uniqueName(String)
        /// The current owner of this well-known name.
        case ownerOf(String)
    }

    public var trustedSender: Sender {
        guard let sender else { return .anyone }
        if sender == Bus.daemonName { return .busDriver }
        if sender.hasPrefix(":") { return .uniqueName(sender) }
        return .ownerOf(sender)
    }

    /// The rule as the bus daemon's AddMatch expects it.
    public var description: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            parts.append("\(key)='\(Self.quoted(value))'")
        }
        add("sender", sender)
        add("interface", interface)
        add("member", member)
        add("path", path?.rawValue)
        add("path_namespace", pathNamespace?.rawValue)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// A value as it goes between the rule's quotes. Inside them nothing is
    /// special but the quote itself, which is written as '\'' (close,
    /// escaped quote, reopen). Done scalar by scalar rather than with
    /// `replacing(_:with:)`, whose generic searcher the daemon would fault in
    /// at start for this alone (docs/development.md, "Footprint").
    static func quoted(_ value: String) -> String {
        guard value.utf8.contains(UInt8(ascii: "'")) else { return value }
        var quoted = ""
        for scalar in value.unicodeScalars {
            if scalar == "'" { quoted += "'\\''" } else { quoted.unicodeScalars.append(scalar) }
        }
        return quoted
    }

    /// Checks the rule against a received signal, with `owner(name)` giving
    /// the current unique owner of a well-known name as the bus driver told
    /// it (nil: no owner, or not known).
    public func matches(_ signal: some SignalFields, owner: (String) -> String? = { _ in nil }) -> Bool {
        guard signal.isSignal else { return false }
        switch trustedSender {
        case .anyone:
            break
        case .busDriver:
            guard signal.hasSender(Bus.daemonName) else { return false }
        case .uniqueName(let name):
            guard signal.hasSender(name) else { return false }
        case .ownerOf(let name):
            guard let current = owner(name), signal.hasSender(current) else { return false }
        }
        if let interface, !signal.hasInterface(interface) { return false }
        if let member, !signal.hasMember(member) { return false }
        if let path, !signal.hasPath(path.rawValue) { return false }
        if let pathNamespace, !signal.isInPathNamespace(pathNamespace.rawValue) { return false }
        if let signature, !signal.hasSignature(signature) { return false }
        if let arg0, !signal.hasFirstStringArgument(arg0) { return false }
        return true
    }
}

/// What a match rule reads of a signal: its header fields and at most its
/// first argument. `RawSignal` answers from libdbus's message without
/// decoding the body (and without making a string of what it compares);
/// `Message` from a decoded one.
public protocol SignalFields {
    var isSignal: Bool { get }
    func hasSender(_ sender: String) -> Bool
    func hasInterface(_ interface: String) -> Bool
    func hasMember(_ member: String) -> Bool
    func hasPath(_ path: String) -> Bool
    /// The path is `namespace` or lies below it.
    func isInPathNamespace(_ namespace: String) -> Bool
    func hasSignature(_ signature: String) -> Bool
    /// The first argument is a string equal to `value`.
    func hasFirstStringArgument(_ value: String) -> Bool
}

extension Message: SignalFields {
    public var isSignal: Bool { kind == .signal }
    public func hasSender(_ sender: String) -> Bool { self.sender == sender }
    public func hasInterface(_ interface: String) -> Bool { self.interface == interface }
    public func hasMember(_ member: String) -> Bool { self.member == member }
    public func hasPath(_ path: String) -> Bool { self.path?.rawValue == path }
    public func isInPathNamespace(_ namespace: String) -> Bool {
        guard let path, let ancestor = ObjectPath(namespace) else { return false }
        return path.isDescendant(of: ancestor)
    }
    public func hasSignature(_ signature: String) -> Bool { self.signature == signature }
    public func hasFirstStringArgument(_ value: String) -> Bool {
        guard case .string(let first)? = body.first else { return false }
        return first == value
    }
}
