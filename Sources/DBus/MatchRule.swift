import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A D-Bus match rule for signals (see the D-Bus specification, "Match Rules").
///
/// The bus daemon routes signals by these rules; the connection applies the
/// same rule again locally to hand each signal only to the streams that asked
/// for it. A `sender` that is a well-known name (`org.bluez`) cannot be
/// checked locally, because signals carry the owner's unique name; the bus
/// daemon's routing is trusted for that field.
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    public var arg0: String?

    public init(
        sender: String? = nil, interface: String? = nil, member: String? = nil,
        path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil, arg0: String? = nil
    ) {
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arg0 = arg0
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

    /// Checks the rule against a received signal.
    public func matches(_ message: Message) -> Bool {
        guard message.kind == .signal else { return false }
        if let sender, sender.hasPrefix(":"), message.sender != sender { return false }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let path, message.path != path { return false }
        if let pathNamespace {
            guard let messagePath = message.path, messagePath.isDescendant(of: pathNamespace) else { return false }
        }
        if let arg0, message.body.first?.string != arg0 { return false }
        return true
    }
}
