import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A match rule as dbus-daemon parses AddMatch's text and routes broadcast
/// messages by it (bus/signals.c in dbus 1.14), for `InProcessBusDaemon`.
///
/// This is the bus's side, not the client's (`MatchRule`): it decides which
/// connections a message without a destination reaches. Its `sender` key
/// names the bus driver, a unique name, or a well-known name whose current
/// primary owner sent the message, as dbus-daemon checks it. Eavesdropping
/// is not modelled: `eavesdrop` is parsed and ignored, and a rule never
/// matches a message addressed to another connection.
struct DaemonMatchRule: Equatable {
    enum ArgumentMatch: Equatable {
        /// `argN`: a string argument equal to the value.
        case string(String)
        /// `argNpath`: a string or object path equal to the value, or a
        /// prefix of it (or it of the value) ending in `/`.
        case path(String)
        /// `arg0namespace`: a string equal to the value or below it (`value.`…).
        case namespace(String)
    }

    var type: Int32?
    var sender: String?
    var interface: String?
    var member: String?
    var path: String?
    var pathNamespace: String?
    var destination: String?
    var arguments: [Int: ArgumentMatch] = [:]

    /// Why dbus-daemon refuses a rule: the text of its MatchRuleInvalid error.
    struct Invalid: Error, Equatable {
        var text: String
    }

    /// The largest N of `argN` dbus-daemon accepts.
    static let maximumArgument = 63

    // MARK: Parsing

    /// Parses AddMatch's text: `key='value'` pairs separated by commas, a
    /// value quoted or not, `\'` outside quotes a literal quote.
    init(parsing text: String) throws(Invalid) {
        var seen: Set<String> = []
        for (key, value) in try Self.pairs(text) {
            guard seen.insert(key).inserted else { throw Invalid(text: "Key \(key) specified twice in match rule\n") }
            try set(key, value)
        }
        if path != nil, pathNamespace != nil {
            throw Invalid(text: "path and path_namespace may not be used together in a match rule")
        }
    }

    private mutating func set(_ key: String, _ value: String) throws(Invalid) {
        switch key {
        case "type":
            switch value {
            case "signal": type = CDBUS_MESSAGE_TYPE_SIGNAL
            case "method_call": type = CDBUS_MESSAGE_TYPE_METHOD_CALL
            case "method_return": type = CDBUS_MESSAGE_TYPE_METHOD_RETURN
            case "error": type = CDBUS_MESSAGE_TYPE_ERROR
            default: throw Invalid(text: "Unknown message type \"\(value)\" in match rule")
            }
        case "sender":
            guard NameValidation.isValidBusName(value) else { throw Invalid(text: "Sender name '\(value)' is invalid\n") }
            sender = value
        case "interface":
            guard NameValidation.isValidInterface(value) else { throw Invalid(text: "Interface name '\(value)' is invalid\n") }
            interface = value
        case "member":
            guard NameValidation.isValidMember(value) else { throw Invalid(text: "Member name '\(value)' is invalid\n") }
            member = value
        case "path", "path_namespace":
            guard NameValidation.isValidPath(value) else { throw Invalid(text: "Path '\(value)' is invalid\n") }
            if key == "path" { path = value } else { pathNamespace = value }
        case "destination":
            guard NameValidation.isValidBusName(value) else { throw Invalid(text: "Destination '\(value)' is invalid\n") }
            destination = value
        case "eavesdrop":
            guard value == "true" || value == "false" else {
                throw Invalid(text: "eavesdrop='\(value)' is invalid, it should be 'true' or 'false'\n")
            }
        case "arg0namespace":
            arguments[0] = .namespace(value)
        default:
            try setArgument(key, value)
        }
    }

    /// `argN` and `argNpath`.
    private mutating func setArgument(_ key: String, _ value: String) throws(Invalid) {
        guard key.hasPrefix("arg") else { throw Invalid(text: "Unknown key \"\(key)\" in match rule") }
        var digits = key.dropFirst(3)
        let isPath = digits.hasSuffix("path")
        if isPath { digits = digits.dropLast(4) }
        guard !digits.isEmpty, digits.count <= 2, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let index = Int(digits),
              index <= Self.maximumArgument
        else { throw Invalid(text: "Key '\(key)' in match rule starts with 'arg' but could not be parsed") }
        arguments[index] = isPath ? .path(value) : .string(value)
    }

    /// The rule's key/value pairs, tokenised as dbus-daemon does.
    private static func pairs(_ text: String) throws(Invalid) -> [(String, String)] {
        var pairs: [(String, String)] = []
        var characters = Substring(text)
        while true {
            characters = characters.drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
            if characters.isEmpty { return pairs }
            guard let equals = characters.firstIndex(of: "=") else {
                throw Invalid(text: "Match rule has a key with no subsequent '=' character")
            }
            let key = String(characters[..<equals])
            guard !key.isEmpty else { throw Invalid(text: "Match rule has a key with no subsequent '=' character") }
            characters = characters[characters.index(after: equals)...]
            var value = ""
            var quoted = false
            while let next = characters.first {
                characters = characters.dropFirst()
                if quoted {
                    if next == "'" { quoted = false } else { value.append(next) }
                } else if next == "'" {
                    quoted = true
                } else if next == "\\", characters.first == "'" {
                    value.append("'")
                    characters = characters.dropFirst()
                } else if next == "," {
                    break
                } else {
                    value.append(next)
                }
            }
            guard !quoted else { throw Invalid(text: "Unbalanced quotation marks in match rule") }
            pairs.append((key, value))
        }
    }

    // MARK: Matching

    /// Whether `message` (stamped, without a destination or addressed to the
    /// rule's connection) matches. `senderOwns(name)` says whether the
    /// sending connection is `name`'s primary owner (its unique name
    /// included); nil for the bus driver's own messages.
    func matches(_ message: OpaquePointer, senderOwns: ((String) -> Bool)?) -> Bool {
        if let type, dbus_message_get_type(message) != type { return false }
        if let sender {
            if let senderOwns {
                guard senderOwns(sender) else { return false }
            } else if sender != InProcessBusDaemon.driverName {
                return false
            }
        }
        if let interface, dbus_message_has_interface(message, interface) == 0 { return false }
        if let member, dbus_message_has_member(message, member) == 0 { return false }
        if let path, dbus_message_has_path(message, path) == 0 { return false }
        if let pathNamespace, !Self.isIn(namespace: pathNamespace, dbus_message_get_path(message)) { return false }
        if let destination, dbus_message_has_destination(message, destination) == 0 { return false }
        return arguments.isEmpty || argumentsMatch(message)
    }

    private static func isIn(namespace: String, _ path: UnsafePointer<CChar>?) -> Bool {
        guard let path else { return false }
        if namespace == "/" { return true }
        let value = String(cString: path)
        return value == namespace || value.hasPrefix(namespace + "/")
    }

    private func argumentsMatch(_ message: OpaquePointer) -> Bool {
        var iterator = DBusMessageIter()
        let hasArguments = dbus_message_iter_init(message, &iterator) != 0
        let last = arguments.keys.max() ?? 0
        var index = 0
        while index <= last {
            let type = hasArguments ? dbus_message_iter_get_arg_type(&iterator) : CDBUS_TYPE_INVALID
            // Past the last argument, the rule's argument at `last` cannot match.
            if type == CDBUS_TYPE_INVALID { return false }
            if let expected = arguments[index], !Self.argument(&iterator, type: type, matches: expected) { return false }
            dbus_message_iter_next(&iterator)
            index += 1
        }
        return true
    }

    private static func argument(_ iterator: inout DBusMessageIter, type: Int32, matches expected: ArgumentMatch) -> Bool {
        let isPathMatch = if case .path = expected { true } else { false }
        guard type == CDBUS_TYPE_STRING || (isPathMatch && type == CDBUS_TYPE_OBJECT_PATH) else { return false }
        var pointer: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iterator, &pointer)
        guard let pointer else { return false }
        let actual = String(cString: pointer)
        switch expected {
        case .string(let value):
            return actual == value
        case .path(let value):
            return actual == value || (value.hasSuffix("/") && actual.hasPrefix(value))
                || (actual.hasSuffix("/") && value.hasPrefix(actual))
        case .namespace(let value):
            return actual == value || actual.hasPrefix(value + ".")
        }
    }
}
