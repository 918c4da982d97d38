import CDBus

/// A method call marshalled once and sent many times: what a keep-alive
/// sends every second.
///
/// Each send puts a copy on the bus (`dbus_message_copy`: the marshalled
/// header and body as they are, a fresh serial when sent), so the arguments
/// are neither built nor marshalled again. `Bus.send(_:)` sends a copy
/// that tells the receiver not to answer (NO_REPLY_EXPECTED): a
/// well-behaved one sends nothing back, so the caller is not woken by it.
/// `Bus.startCall(_:timeout:completion:)` sends one that waits for the
/// reply, as any other call.
///
/// Invariant: the template is never sent itself, so it stays unlocked and
/// unchanged after `init`; it carries no file descriptors (a copy would
/// hold duplicates of them).
///
/// Threading: `@unchecked Sendable` because the template is immutable
/// after `init` and libdbus only reads it when copying; sending happens on
/// the bus's loop, as every other send.
public final class PreparedCall: @unchecked Sendable {
    let template: OutgoingMessage

    public init(
        destination: String, path: ObjectPath, interface: String, method: String, _ arguments: [DBusValue]
    ) throws(DBusError) {
        template = try OutgoingMessage.methodCall(
            destination: destination, path: path, interface: interface, member: method, body: arguments
        )
        guard !template.carriesUnixFDs else {
            throw .invalidArgument("a prepared call cannot carry file descriptors")
        }
    }
}
