import CDBus

extension Message {
    /// Decodes one message in the D-Bus wire format (what travels on a bus
    /// socket, and what `wireFormat()` writes). libdbus validates the bytes in
    /// full, as it does for a peer's messages, and the body is decoded the way
    /// `Connection` decodes incoming messages.
    ///
    /// Throws `.malformed` when libdbus rejects the bytes (with its reason),
    /// when `bytes` is not exactly one message, and for a message type D-Bus
    /// does not define (which libdbus accepts, and receivers ignore). A body
    /// that names Unix file descriptors cannot be decoded from bytes alone
    /// (the descriptors travel beside them), and is rejected too.
    public init(wireFormat bytes: [UInt8]) throws(DBusError) {
        let raw = try Message.demarshal(bytes)
        defer { dbus_message_unref(raw) }
        guard case let (message, bodyError)? = Message.copy(from: raw) else {
            throw .malformed("unknown message type \(dbus_message_get_type(raw))")
        }
        if let bodyError { throw bodyError }
        self = message
    }

    /// libdbus's message from `bytes`, exactly one message (the caller
    /// unrefs it). dbus_message_demarshal reports a truncated message as out
    /// of memory and ignores bytes after the first message; the length from
    /// the header tells both apart from real trouble.
    static func demarshal(_ bytes: [UInt8]) throws(DBusError) -> OpaquePointer {
        let needed = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                dbus_message_demarshal_bytes_needed(chars.baseAddress, Int32(clamping: chars.count))
            }
        }
        guard needed > 0 else {
            throw .malformed(needed < 0 ? "invalid message header" : "\(bytes.count) bytes are too few for a message header")
        }
        guard Int(needed) == bytes.count else {
            throw .malformed("the header announces a \(needed)-byte message, got \(bytes.count) bytes")
        }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        let raw = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                dbus_message_demarshal(chars.baseAddress, Int32(clamping: chars.count), &error)
            }
        }
        guard let raw else {
            if dbus_error_has_name(&error, "org.freedesktop.DBus.Error.NoMemory") != 0 { throw .outOfMemory }
            throw .malformed(error.message.map { String(cString: $0) } ?? "rejected by libdbus")
        }
        return raw
    }

    /// The message in the D-Bus wire format (little-endian), such that
    /// `Message(wireFormat:)` gives it back. The header's signature is the
    /// body's (`signature` is not consulted).
    ///
    /// Throws `.invalidArgument` for what libdbus would abort on or refuse to
    /// read back: an invalid name, a body `Marshalling` refuses, serial 0, a
    /// header field the message type requires that is missing, and the
    /// `org.freedesktop.DBus.Local` path and interface, which only libdbus itself
    /// may use, and Unix file descriptors, which cannot travel as bytes. The
    /// flags other than no-reply-expected are not carried.
    public func wireFormat() throws(DBusError) -> [UInt8] {
        guard serial != 0 else { throw .invalidArgument("a message's serial must not be 0") }
        let type: Int32
        switch kind {
        case .methodCall:
            guard path != nil, member != nil else { throw .invalidArgument("a method call needs a path and a member") }
            type = CDBUS_MESSAGE_TYPE_METHOD_CALL
        case .methodReturn:
            guard replySerial != 0 else { throw .invalidArgument("a method return needs a reply serial") }
            type = CDBUS_MESSAGE_TYPE_METHOD_RETURN
        case .error:
            guard errorName != nil, replySerial != 0 else {
                throw .invalidArgument("an error needs an error name and a reply serial")
            }
            type = CDBUS_MESSAGE_TYPE_ERROR
        case .signal:
            guard path != nil, interface != nil, member != nil else {
                throw .invalidArgument("a signal needs a path, an interface and a member")
            }
            type = CDBUS_MESSAGE_TYPE_SIGNAL
        }
        if path?.rawValue == Self.localPath { throw .invalidArgument("the path \(Self.localPath) is libdbus's own") }
        if interface == Self.localInterface { throw .invalidArgument("the interface \(Self.localInterface) is libdbus's own") }
        // Every name is checked before it reaches libdbus, which aborts on invalid ones.
        if let interface { try NameCheck.interface(interface) }
        if let member { try NameCheck.member(member) }
        if let errorName { try NameCheck.errorName(errorName) }
        if let destination { try NameCheck.busName(destination) }
        if let sender { try NameCheck.busName(sender) }

        guard let raw = dbus_message_new(type) else { throw .outOfMemory }
        defer { dbus_message_unref(raw) }
        if let path, dbus_message_set_path(raw, path.rawValue) == 0 { throw .outOfMemory }
        if let interface, dbus_message_set_interface(raw, interface) == 0 { throw .outOfMemory }
        if let member, dbus_message_set_member(raw, member) == 0 { throw .outOfMemory }
        if let errorName, dbus_message_set_error_name(raw, errorName) == 0 { throw .outOfMemory }
        if let destination, dbus_message_set_destination(raw, destination) == 0 { throw .outOfMemory }
        if let sender, dbus_message_set_sender(raw, sender) == 0 { throw .outOfMemory }
        if replySerial != 0, dbus_message_set_reply_serial(raw, replySerial) == 0 { throw .outOfMemory }
        dbus_message_set_serial(raw, serial)
        dbus_message_set_no_reply(raw, noReplyExpected ? 1 : 0)
        try Marshalling.append(body, to: raw)
        guard dbus_message_contains_unix_fds(raw) == 0 else {
            throw .invalidArgument("file descriptors cannot travel in the wire format's bytes")
        }

        var buffer: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard dbus_message_marshal(raw, &buffer, &length) != 0, let buffer else { throw .outOfMemory }
        defer { dbus_free(buffer) }
        return buffer.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(length)))
        }
    }

    /// libdbus refuses to load messages that use these (DBUS_PATH_LOCAL, DBUS_INTERFACE_LOCAL).
    private static let localPath = "/org/freedesktop/DBus/Local"
    private static let localInterface = "org.freedesktop.DBus.Local"
}

extension RawSignal {
    /// Lends the message that `bytes` encode to `body` as libdbus holds it,
    /// its body undecoded: how the fuzzer checks that the checks made on a
    /// header (`SignalFields`) agree with the decoded `Message`'s. Nil when
    /// libdbus refuses the bytes.
    public static func borrowing<T>(wireFormat bytes: [UInt8], _ body: (RawSignal) -> T) -> T? {
        guard let raw = try? Message.demarshal(bytes) else { return nil }
        defer { dbus_message_unref(raw) }
        return body(RawSignal(raw: raw))
    }
}
