import DBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The answer to `AcquireNotify`: one end of a `SOCK_SEQPACKET` socketpair on
/// which bluetoothd writes each notification as one datagram of at most
/// `mtu` bytes, and nothing else.
///
/// Invariants: `socket` is open and owned by this value's holder, who must
/// close it (closing it is how a client gives the notifications back: there
/// is no release call). bluetoothd closes its end on every link loss and
/// when it exits.
public struct AcquiredNotifications: Sendable, Equatable {
    public var socket: Int32
    public var mtu: UInt16

    /// Takes the descriptor out of an `AcquireNotify` reply, which must be
    /// `(h, q)`. Throws `.malformed` otherwise; any descriptor in a malformed
    /// reply is closed with it.
    public init(reply: [DBusValue]) throws(BlueZError) {
        guard reply.count == 2, case .unixFD(let descriptor) = reply[0], case .uint16(let mtu) = reply[1] else {
            throw .malformed("AcquireNotify reply is not (h fd, q mtu): \(reply.map(\.type.signature).joined())")
        }
        guard let socket = descriptor.take() else { throw .malformed("AcquireNotify reply's descriptor was already taken") }
        self.socket = socket
        self.mtu = mtu
    }
}
