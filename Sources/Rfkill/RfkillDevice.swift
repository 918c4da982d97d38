#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `/dev/rfkill`: reading it gives one event per switch at open, then one
/// per change; writing `RFKILL_OP_CHANGE` sets a switch's soft block.
///
/// The simulator's rfkill: when the path is a Unix socket (`open(2)` fails
/// with `ENXIO` on one, or `stat` says `S_IFSOCK`), a `SOCK_SEQPACKET`
/// socket is connected to it instead, for reading the events and for writing
/// the change, one datagram per 8-byte record. `tether-dev simulate --rfkill`
/// serves such a socket (see docs/development.md); the product never meets
/// one on a gateway, where `/dev/rfkill` is a character device.
///
/// Threading: not thread-safe; its owner reads it on one thread when its
/// descriptor is readable.
public final class RfkillDevice {
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        case open(path: String, errno: Int32)
        case write(path: String, errno: Int32)
        case read(errno: Int32)
        /// The simulator's rfkill socket closed (the simulator stopped).
        case closed(path: String)

        public var description: String {
            switch self {
            case .open(let path, let code):
                "cannot open \(path): \(String(cString: strerror(code)))"
                    + (code == EACCES ? " (the tether group needs write access: the package's udev rule gives it)" : "")
            case .write(let path, let code): "cannot change the block through \(path): \(String(cString: strerror(code)))"
            case .read(let code): "reading rfkill events failed: \(String(cString: strerror(code)))"
            case .closed(let path): "\(path) closed (the simulator's rfkill socket)"
            }
        }
    }

    public static let defaultPath = "/dev/rfkill"

    public let path: String
    public let descriptor: Int32
    /// The simulator's socket rather than the kernel's device: end of file
    /// means it is gone (the kernel's device never ends).
    public let isSocket: Bool
    /// Set when reading failed for good; the owner stops watching.
    public private(set) var failure: Failure?

    private init(path: String, descriptor: Int32, isSocket: Bool) {
        self.path = path
        self.descriptor = descriptor
        self.isSocket = isSocket
    }

    /// Opens the device for events, non-blocking.
    public static func openEvents(path: String = defaultPath) -> Result<RfkillDevice, Failure> {
        switch openDescriptor(path, write: false) {
        case .success(let opened): .success(RfkillDevice(path: path, descriptor: opened.descriptor, isSocket: opened.isSocket))
        case .failure(let failure): .failure(failure)
        }
    }

    /// `open(2)`, or for the simulator's socket a connected `SOCK_SEQPACKET`
    /// socket (non-blocking for events, blocking for a write).
    private static func openDescriptor(_ path: String, write: Bool) -> Result<(descriptor: Int32, isSocket: Bool), Failure> {
        let fd = systemOpen(path, (write ? O_WRONLY : O_RDONLY | O_NONBLOCK) | O_CLOEXEC)
        if fd >= 0 { return .success((fd, false)) }
        let openError = errno
        guard openError == ENXIO || isSocketPath(path) else { return .failure(.open(path: path, errno: openError)) }
        let socket = connectSeqpacket(path, nonBlocking: !write)
        guard socket >= 0 else { return .failure(.open(path: path, errno: errno)) }
        return .success((socket, true))
    }

    /// Every event waiting now (none when it would block).
    public func readEvents() -> [RfkillEvent] {
        var events: [RfkillEvent] = []
        var buffer = [UInt8](repeating: 0, count: RfkillEvent.size)
        while failure == nil {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, RfkillEvent.size) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno != EAGAIN && errno != EWOULDBLOCK { failure = .read(errno: errno) }
                break
            }
            if count == 0 {
                // A socket at end of file stays readable: without this the
                // owner's watch would fire for ever.
                if isSocket { failure = .closed(path: path) }
                break
            }
            if let event = RfkillEvent(bytes: buffer.prefix(count)) { events.append(event) }
        }
        return events
    }

    public func close() {
        systemClose(descriptor)
    }

    /// Sets or clears the soft block of switch `index`. A short blocking
    /// write: the kernel applies it at once (a controller it unblocks is
    /// powered on again by bluetoothd, not by this).
    public static func setSoftBlock(index: UInt32, blocked: Bool, path: String = defaultPath) -> Result<Void, Failure> {
        let fd: Int32
        switch openDescriptor(path, write: true) {
        case .success(let opened): fd = opened.descriptor
        case .failure(let failure): return .failure(failure)
        }
        defer { systemClose(fd) }
        let event = RfkillEvent(index: index, type: 0, operation: .change, softBlocked: blocked, hardBlocked: false)
        let bytes = event.bytes
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { return .failure(.write(path: path, errno: written < 0 ? errno : EIO)) }
        return .success(())
    }

    /// `/sys/class/rfkill/rfkill<index>/name`, the switch's name (`hci0`).
    public static func name(ofSwitch index: UInt32, sysfs: String = "/sys/class/rfkill") -> String? {
        let path = "\(sysfs)/rfkill\(index)/name"
        let fd = systemOpen(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { systemClose(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 128) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self)
        return text.split(whereSeparator: { $0 == "\n" }).first.map(String.init)
    }
}

// The C calls under names the type's own `open` and `close` do not hide.
private func systemOpen(_ path: String, _ flags: Int32) -> Int32 { open(path, flags) }
private func systemClose(_ descriptor: Int32) { _ = close(descriptor) }

private func isSocketPath(_ path: String) -> Bool {
    var info = stat()
    return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK
}

/// A `SOCK_SEQPACKET` socket connected to the Unix socket at `path`; -1
/// with `errno` set on failure.
private func connectSeqpacket(_ path: String, nonBlocking: Bool) -> Int32 {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard bytes.count < capacity else {
        errno = ENAMETOOLONG
        return -1
    }
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        buffer.copyBytes(from: bytes)
        buffer[bytes.count] = 0
    }
    #if canImport(Glibc)
    // glibc declares the socket types in an enum, musl as plain integers.
    let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | (nonBlocking ? Int32(SOCK_NONBLOCK.rawValue) : 0)
    #else
    let type = SOCK_SEQPACKET | SOCK_CLOEXEC | (nonBlocking ? SOCK_NONBLOCK : 0)
    #endif
    let fd = socket(AF_UNIX, type, 0)
    guard fd >= 0 else { return -1 }
    // A connect on a non-blocking Unix socket completes at once or fails.
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard connected == 0 else {
        let error = errno
        systemClose(fd)
        errno = error
        return -1
    }
    return fd
}

/// Where rfkill is read: the device and the sysfs class directory that
/// names its switches. Tests point both at files of their own.
public struct RfkillSource: Sendable, Equatable {
    public var device: String
    public var sysfs: String

    public init(device: String = RfkillDevice.defaultPath, sysfs: String = "/sys/class/rfkill") {
        self.device = device
        self.sysfs = sysfs
    }
}
