import CDBus

/// A D-Bus message as Swift sees it: headers plus the decoded body.
///
/// Incoming messages are copied out of libdbus on the connection's executor,
/// so a `Message` is a plain value that can cross tasks freely.
public struct Message: Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case methodCall, methodReturn, error, signal
    }

    public var kind: Kind
    public var serial: UInt32
    public var replySerial: UInt32
    public var sender: String?
    public var destination: String?
    public var path: ObjectPath?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var signature: String
    public var body: [DBusValue]
    /// Set on method calls whose caller does not want a reply.
    public var noReplyExpected: Bool

    public var description: String {
        let what = [interface, member].compactMap { $0 }.joined(separator: ".")
        return "\(kind) \(path?.rawValue ?? "-") \(what) from \(sender ?? "-") (\(signature))"
    }

    public init(
        kind: Kind, serial: UInt32 = 0, replySerial: UInt32 = 0, sender: String? = nil, destination: String? = nil,
        path: ObjectPath? = nil, interface: String? = nil, member: String? = nil, errorName: String? = nil,
        signature: String = "", body: [DBusValue] = [], noReplyExpected: Bool = false
    ) {
        self.kind = kind
        self.serial = serial
        self.replySerial = replySerial
        self.sender = sender
        self.destination = destination
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.signature = signature
        self.body = body
        self.noReplyExpected = noReplyExpected
    }

    /// The first body argument as a string, which is where error replies keep their text.
    var firstString: String { body.first?.string ?? "" }
}

extension Message {
    /// Copies an incoming libdbus message. Body decoding can fail (a
    /// descriptor libdbus cannot duplicate); the headers are still returned
    /// and `bodyError` says why the body is empty. Nil for a message type other than
    /// the four D-Bus defines: libdbus passes those on, and the spec says to
    /// ignore them (taking one for a signal, say, is wrong).
    static func copy(from raw: OpaquePointer) -> (Message, DBusError?)? {
        let kind: Kind
        switch dbus_message_get_type(raw) {
        case CDBUS_MESSAGE_TYPE_METHOD_CALL: kind = .methodCall
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN: kind = .methodReturn
        case CDBUS_MESSAGE_TYPE_ERROR: kind = .error
        case CDBUS_MESSAGE_TYPE_SIGNAL: kind = .signal
        default: return nil
        }
        var message = header(of: raw, kind: kind)
        var bodyError: DBusError?
        do {
            message.body = try Marshalling.readBody(of: raw)
        } catch {
            bodyError = error
        }
        return (message, bodyError)
    }

    /// An incoming message's header fields, its body left unread (empty):
    /// what is checked before anything of the body is decoded.
    static func header(of raw: OpaquePointer, kind: Kind) -> Message {
        Message(
            kind: kind,
            serial: dbus_message_get_serial(raw),
            replySerial: dbus_message_get_reply_serial(raw),
            sender: string(dbus_message_get_sender(raw)),
            destination: string(dbus_message_get_destination(raw)),
            path: string(dbus_message_get_path(raw)).flatMap(ObjectPath.init),
            interface: string(dbus_message_get_interface(raw)),
            member: string(dbus_message_get_member(raw)),
            errorName: string(dbus_message_get_error_name(raw)),
            signature: string(dbus_message_get_signature(raw)) ?? "",
            body: [],
            noReplyExpected: dbus_message_get_no_reply(raw) != 0
        )
    }

    private static func string(_ pointer: UnsafePointer<CChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }
}

/// Owns one reference to a libdbus message and drops it when released.
/// Outgoing messages are built on the connection's executor and handed
/// straight to libdbus, so this never leaves it.
final class OutgoingMessage {
    let raw: OpaquePointer

    private init(raw: OpaquePointer) { self.raw = raw }
    deinit { dbus_message_unref(raw) }

    static func methodCall(
        destination: String?, path: ObjectPath, interface: String?, member: String, body: [DBusValue]
    ) throws(DBusError) -> OutgoingMessage {
        if let destination { try NameCheck.busName(destination) }
        if let interface { try NameCheck.interface(interface) }
        try NameCheck.member(member)
        guard let raw = dbus_message_new_method_call(destination, path.rawValue, interface, member) else {
            throw .outOfMemory
        }
        let message = OutgoingMessage(raw: raw)
        try Marshalling.append(body, to: raw)
        return message
    }

    /// A new message with this one's header fields and body, copied as
    /// marshalled. Unlike the original it has no serial and is not locked,
    /// even if the original was sent.
    func copy() throws(DBusError) -> OutgoingMessage {
        guard let copied = dbus_message_copy(raw) else { throw .outOfMemory }
        return OutgoingMessage(raw: copied)
    }

    /// Whether the body carries Unix file descriptors, which only a
    /// connection that negotiated fd passing can send.
    var carriesUnixFDs: Bool { dbus_message_contains_unix_fds(raw) != 0 }

    /// Marks the message as not wanting a reply (used for calls whose result
    /// nobody waits for, like RemoveMatch).
    func setNoReply() { dbus_message_set_no_reply(raw, 1) }

    static func signal(path: ObjectPath, interface: String, member: String, body: [DBusValue], destination: String? = nil)
        throws(DBusError) -> OutgoingMessage
    {
        try NameCheck.interface(interface)
        try NameCheck.member(member)
        if let destination { try NameCheck.busName(destination) }
        guard let raw = dbus_message_new_signal(path.rawValue, interface, member) else { throw .outOfMemory }
        let message = OutgoingMessage(raw: raw)
        if let destination, dbus_message_set_destination(raw, destination) == 0 { throw .outOfMemory }
        try Marshalling.append(body, to: raw)
        return message
    }

    /// A method return for `call`, built from the copied headers so the
    /// original libdbus message need not be kept alive while a handler runs.
    static func methodReturn(to call: Message, body: [DBusValue]) throws(DBusError) -> OutgoingMessage {
        guard let raw = dbus_message_new(CDBUS_MESSAGE_TYPE_METHOD_RETURN) else { throw .outOfMemory }
        let message = OutgoingMessage(raw: raw)
        try message.address(replyTo: call)
        try Marshalling.append(body, to: raw)
        return message
    }

    static func error(to call: Message, name: String, text: String) throws(DBusError) -> OutgoingMessage {
        try NameCheck.errorName(name)
        guard let raw = dbus_message_new(CDBUS_MESSAGE_TYPE_ERROR) else { throw .outOfMemory }
        let message = OutgoingMessage(raw: raw)
        guard dbus_message_set_error_name(raw, name) != 0 else { throw .outOfMemory }
        try message.address(replyTo: call)
        // An unrepresentable text (a NUL inside) must not cost the caller its reply.
        let safeText = NameValidation.isValidUTF8(text) ? text : "(unprintable error text)"
        try Marshalling.append([.string(safeText)], to: raw)
        return message
    }

    private func address(replyTo call: Message) throws(DBusError) {
        dbus_message_set_no_reply(raw, 1)
        guard dbus_message_set_reply_serial(raw, call.serial) != 0 else { throw .outOfMemory }
        if let sender = call.sender {
            try NameCheck.busName(sender)
            guard dbus_message_set_destination(raw, sender) != 0 else { throw .outOfMemory }
        }
    }
}
