import CBluetooth
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A read-only socket on the kernel's Bluetooth management interface.
///
/// Tether sends no management commands: it listens, for what bluetoothd
/// 5.66 does not pass on (the reason a link dropped). The kernel sends
/// Device Disconnected only to sockets bound by a process with
/// CAP_NET_ADMIN (`trusted`); an untrusted socket hears index events only.
///
/// Threading: not thread-safe; the owner reads it from one thread (its event
/// loop, when `descriptor` is readable). Invariant: after `close()` the
/// descriptor is -1 and `readEvents` returns nothing.
public final class ManagementSocket {
    public private(set) var descriptor: Int32
    /// Whether the kernel will send this socket the trusted events.
    public let trusted: Bool
    private var buffer = [UInt8](repeating: 0, count: 1024)

    private init(descriptor: Int32, trusted: Bool) {
        self.descriptor = descriptor
        self.trusted = trusted
    }

    deinit { close() }

    /// Opens and binds the socket (non-blocking).
    public static func open() -> Result<ManagementSocket, HCIController.Failure> {
        let fd = tether_mgmt_open()
        if fd < 0 {
            let code = -fd
            let text = String(cString: strerror(code))
            switch code {
            case EAFNOSUPPORT, EPROTONOSUPPORT: return .failure(.unavailable("this kernel has no Bluetooth (\(text))"))
            case EPERM, EACCES: return .failure(.unavailable("not permitted (\(text))"))
            default: return .failure(.failed("management socket: \(text)"))
            }
        }
        return .success(ManagementSocket(descriptor: fd, trusted: tether_has_net_admin() != 0))
    }

    /// Why the socket closed itself (a read failed), once it has.
    public private(set) var failure: String?

    /// Every event queued on the socket now; an empty array when none is.
    /// Datagrams that do not parse are skipped. A read that fails for any
    /// reason but an empty queue sets `failure`, and reads no more: a socket
    /// in error stays readable, so its owner must stop watching and close it.
    public func readEvents() -> [ManagementEvent] {
        var events: [ManagementEvent] = []
        while descriptor >= 0, failure == nil {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                if code != EAGAIN && code != EWOULDBLOCK {
                    failure = "reading the management socket failed: \(String(cString: strerror(code)))"
                }
                break
            }
            if count == 0 { break }
            if let event = ManagementEvent(datagram: buffer[0..<count]) { events.append(event) }
        }
        return events
    }

    public func close() {
        if descriptor >= 0 { closeDescriptor(descriptor) }
        descriptor = -1
    }
}

/// close(2), under a name of its own: inside a type with a `close()` method the
/// bare name means the method, and the C library's module is Glibc or Musl.
private func closeDescriptor(_ fd: Int32) { _ = close(fd) }
