#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `/dev/rfkill`: reading it gives one event per switch at open, then one
/// per change; writing `RFKILL_OP_CHANGE` sets a switch's soft block.
///
/// Threading: not thread-safe; its owner reads it on one thread when its
/// descriptor is readable.
public final class RfkillDevice {
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        case open(path: String, errno: Int32)
        case write(path: String, errno: Int32)
        case read(errno: Int32)

        public var description: String {
            switch self {
            case .open(let path, let code):
                "cannot open \(path): \(String(cString: strerror(code)))"
                    + (code == EACCES ? " (the tether group needs write access: the package's udev rule gives it)" : "")
            case .write(let path, let code): "cannot change the block through \(path): \(String(cString: strerror(code)))"
            case .read(let code): "reading rfkill events failed: \(String(cString: strerror(code)))"
            }
        }
    }

    public static let defaultPath = "/dev/rfkill"

    public let path: String
    public let descriptor: Int32
    /// Set when reading failed for good; the owner stops watching.
    public private(set) var failure: Failure?

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    /// Opens the device for events, non-blocking.
    public static func openEvents(path: String = defaultPath) -> Result<RfkillDevice, Failure> {
        let fd = systemOpen(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.open(path: path, errno: errno)) }
        return .success(RfkillDevice(path: path, descriptor: fd))
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
            if count == 0 { break }
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
        let fd = systemOpen(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.open(path: path, errno: errno)) }
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
