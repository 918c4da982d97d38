import CEventLoop
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Reads an acquired notification socket (see `AcquiredNotifications`) on
/// an event loop: every wake-up drains what the socket holds, up to 64
/// datagrams per recvmmsg(2), and hands each datagram, one notification,
/// to `onDatagram` in arrival order.
///
/// The socket ends when bluetoothd closes its end: on every link loss, when
/// it exits, and on a StopNotify from anyone. Then `onEnd` runs once, after
/// every datagram still queued has been handed over.
///
/// Threading: confined to `loop`; create, use and `close()` it there.
/// Invariants: after `onEnd` or `close()` the descriptor is closed, the
/// watch removed, and neither callback runs again.
public final class NotificationSocketReader {
    public enum End: Sendable, Equatable, CustomStringConvertible {
        /// End-of-file or hang-up: bluetoothd closed its end.
        case closedByBluetoothd
        /// A read failed with this errno.
        case failed(Int32)

        public var description: String {
            switch self {
            case .closedByBluetoothd: "bluetoothd closed the notification socket"
            case .failed(let code): "reading the notification socket failed: \(String(cString: strerror(code)))"
            }
        }
    }

    /// Datagrams per recvmmsg(2).
    static let batch = 64

    private let loop: EventLoop
    private var socket: Int32
    private let slot: Int
    private var watch: EventLoop.WatchID?
    private var buffer: [UInt8]
    private var lengths: [UInt32]
    private var truncated: [Int32]
    private let onDatagram: ([UInt8]) -> Void
    private var onEnd: ((End) -> Void)?

    /// Starts reading; takes ownership of `acquired.socket`.
    public init(
        _ acquired: AcquiredNotifications, loop: EventLoop, onDatagram: @escaping ([UInt8]) -> Void,
        onEnd: @escaping (End) -> Void
    ) {
        loop.checkIsolated()
        self.loop = loop
        socket = acquired.socket
        // A notification carries at most MTU - 3 bytes; the whole MTU is room enough.
        slot = max(Int(acquired.mtu), 23)
        buffer = [UInt8](repeating: 0, count: slot * Self.batch)
        lengths = [UInt32](repeating: 0, count: Self.batch)
        truncated = [Int32](repeating: 0, count: Self.batch)
        self.onDatagram = onDatagram
        self.onEnd = onEnd
        _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) | O_NONBLOCK)
        watch = loop.watch(socket, interest: .readable) { [unowned self] ready in readable(ready) }
    }

    deinit { release() }

    public var isOpen: Bool { socket >= 0 }

    /// Stops reading and closes the socket, which gives the notifications
    /// back to bluetoothd; first hands over every datagram already queued,
    /// so that what bluetoothd sent before the close is not lost. `onEnd` is
    /// not called.
    public func close() {
        loop.checkIsolated()
        onEnd = nil
        readable([])
        release()
    }

    private func release() {
        onEnd = nil
        if let watch { loop.removeWatch(watch) }
        watch = nil
        if socket >= 0 { closeDescriptor(socket) }
        socket = -1
    }

    private func end(_ why: End) {
        let handler = onEnd
        release()
        handler?(why)
    }

    private func readable(_ ready: EventLoop.Readiness) {
        while socket >= 0 {
            let received = buffer.withUnsafeMutableBufferPointer { bytes in
                lengths.withUnsafeMutableBufferPointer { lengths in
                    truncated.withUnsafeMutableBufferPointer { truncated in
                        ceventloop_receive_datagrams(
                            socket, bytes.baseAddress, UInt32(slot), UInt32(Self.batch), lengths.baseAddress,
                            truncated.baseAddress
                        )
                    }
                }
            }
            if received < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    // Drained; a hang-up with nothing left to read is the end.
                    if !ready.intersection(.hangup).isEmpty { end(.closedByBluetoothd) }
                    return
                }
                return end(code == ECONNRESET ? .closedByBluetoothd : .failed(code))
            }
            for index in 0..<Int(received) {
                let length = Int(lengths[index])
                // On a SEQPACKET socket end-of-file reads as an empty datagram;
                // only a hung-up socket tells it from an empty notification.
                if length == 0, hungUp() { return end(.closedByBluetoothd) }
                let start = index * slot
                onDatagram(Array(buffer[start..<start + min(length, slot)]))
                guard socket >= 0 else { return }  // closed by the handler
            }
            if Int(received) < Self.batch {
                if !ready.intersection(.hangup).isEmpty, hungUp() { continue }  // read to the end-of-file
                return
            }
        }
    }

    /// POLLRDHUP, which glibc declares only under _GNU_SOURCE.
    private static let pollReadHangup: Int16 = 0x2000

    /// Whether the peer has closed (or shut down) its end.
    private func hungUp() -> Bool {
        var entry = pollfd(fd: socket, events: Self.pollReadHangup, revents: 0)
        guard poll(&entry, 1, 0) == 1 else { return false }
        return entry.revents & (Int16(POLLHUP) | Self.pollReadHangup) != 0
    }
}

/// close(2), under a name of its own: inside a type with a `close()` method the
/// bare name means the method, and the C library's module is Glibc or Musl.
private func closeDescriptor(_ fd: Int32) { _ = close(fd) }
