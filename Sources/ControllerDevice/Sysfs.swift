#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The few sysfs operations the controller's devices need: follow a link,
/// read a one-line attribute, write a word to a driver's `bind` or
/// `unbind`. Paths are passed whole, so tests point them at a tree in a
/// temporary directory.
public enum Sysfs {
    /// The path with every symbolic link followed; nil when it does not exist.
    public static func resolvedPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// `1-1:1.0` of `/sys/devices/…/1-1/1-1:1.0`.
    public static func lastComponent(_ path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    public static func parent(_ path: String) -> String {
        var parts = path.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count > 1 { parts.removeLast() }
        return parts.joined(separator: "/")
    }

    /// The name of the driver bound to the device at `devicePath`; nil when none is.
    public static func driver(of devicePath: String) -> String? {
        resolvedPath("\(devicePath)/driver").map(lastComponent)
    }

    /// The first word of an attribute (`busnum`, `devnum`); nil when unreadable or empty.
    public static func readLine(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { _ = close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 64) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self)
        return text.split(whereSeparator: { $0 == "\n" || $0 == " " }).first.map(String.init)
    }

    /// Writes `text` to a sysfs file; the errno of a failure.
    public static func write(_ text: String, to path: String) -> Int32? {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno }
        defer { _ = close(fd) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
        return written == bytes.count ? nil : (written < 0 ? errno : EIO)
    }

    /// The entries of a directory, sorted; empty when it cannot be read.
    public static func entries(of directory: String) -> [String] {
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// strerror's text for `code`.
    public static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}

// The C call under a name `Sysfs.write(_:to:)` does not hide.
private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, bytes, count) }
