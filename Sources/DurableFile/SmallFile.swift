#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A small file read and replaced whole: the forwarder's cursor, its status
/// file, the MQTT password and the metrics textfiles. One place for the
/// system calls, so that each caller only says what the file is in its error
/// messages.
///
/// Replacing writes `PATH.tmp` and renames it over `PATH`, so that a reader
/// sees the old contents or the new, never a torn mix; `durable` also
/// fsyncs the file before the rename and the directory after, so that the
/// new contents survive a crash or a power loss.
public enum SmallFile {
    /// A failed system call: which (`operation`, with the path it was on)
    /// and its errno.
    public struct Failure: Error, CustomStringConvertible {
        public let operation: String
        public let code: Int32
        public var reason: String { String(cString: strerror(code)) }
        public var description: String { "\(operation): \(reason)" }

        public init(operation: String, code: Int32) {
            self.operation = operation
            self.code = code
        }
    }

    /// Up to `limit` bytes from the start of `path`; nil when there is no
    /// such file.
    public static func read(_ path: String, limit: Int) throws(Failure) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw Failure(operation: "read \(path)", code: errno)
        }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: limit)
        var count = 0
        while count < limit {
            let result = bytes.withUnsafeMutableBytes { buffer in
                systemRead(fd, buffer.baseAddress.map { $0 + count }, limit - count)
            }
            if result < 0, errno == EINTR { continue }
            guard result >= 0 else { throw Failure(operation: "read \(path)", code: errno) }
            if result == 0 { break }
            count += result
        }
        return Array(bytes.prefix(count))
    }

    /// - Parameters:
    ///   - mode: the new file's permissions, whatever the umask (the metrics
    ///     textfiles are read by node_exporter's user, so 0644).
    ///   - syncDirectory: with `durable`, also fsync the directory, so that
    ///     the rename itself survives a power loss (the cursor needs that; a
    ///     metrics file, rewritten every interval, does not).
    public static func replace(
        _ path: String, with bytes: [UInt8], durable: Bool, syncDirectory: Bool = true, mode: mode_t = 0o640
    ) throws(Failure) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw Failure(operation: "create \(temporary)", code: errno) }
        // Exactly `mode`, whatever the umask (the units set UMask=0027).
        _ = fchmod(fd, mode)
        let written = write(fd, bytes, bytes.count)
        var code = written < 0 ? errno : ENOSPC
        var complete = written == bytes.count
        if complete, durable, fsync(fd) != 0 {
            code = errno
            complete = false
        }
        close(fd)
        guard complete else { throw Failure(operation: "write \(temporary)", code: code) }
        guard rename(temporary, path) == 0 else { throw Failure(operation: "rename \(temporary)", code: errno) }
        guard durable, syncDirectory else { return }
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let directoryFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }
}

/// read(2), under a name of its own: inside `SmallFile.read` the bare name
/// means the method, and the C library's module is Glibc or Musl.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, buffer, count) }
