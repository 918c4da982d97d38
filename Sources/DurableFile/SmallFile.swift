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
/// sees the old contents or the new, never a torn mix. `PATH.tmp` is always
/// a new file (`createTemporary`): a symlink or file planted at that name is
/// removed, never written through. `durable` also
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
        try readWithStatus(path, limit: limit)?.bytes
    }

    /// `read`, with the file's status (fstat(2) of the descriptor the bytes
    /// were read from, so a check of its mode or owner is about that very
    /// file, not one swapped in at the path since).
    public static func readWithStatus(_ path: String, limit: Int) throws(Failure) -> (bytes: [UInt8], status: stat)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw Failure(operation: "read \(path)", code: errno)
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw Failure(operation: "stat \(path)", code: errno) }
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
        return (Array(bytes.prefix(count)), status)
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
        let fd = try createTemporary(temporary, mode: mode)
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
        guard complete else {
            _ = unlink(temporary)
            throw Failure(operation: "write \(temporary)", code: code)
        }
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

extension SmallFile {
    /// Creates `temporary` afresh: O_EXCL|O_NOFOLLOW, so that neither a file
    /// nor a symlink someone planted at the name (the directory may be
    /// writable by others, like node_exporter's textfile directory) is ever
    /// opened, truncated or written through. One already there (left by a
    /// crash between create and rename, or planted) is unlinked (which
    /// removes a symlink itself, never its target) and the create tried once
    /// more; anything else, or a second EEXIST, is the caller's error.
    static func createTemporary(_ temporary: String, mode: mode_t) throws(Failure) -> Int32 {
        let flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC
        var fd = open(temporary, flags, mode)
        if fd < 0, errno == EEXIST {
            guard unlink(temporary) == 0 || errno == ENOENT else {
                throw Failure(operation: "remove the stale \(temporary)", code: errno)
            }
            fd = open(temporary, flags, mode)
        }
        guard fd >= 0 else { throw Failure(operation: "create \(temporary)", code: errno) }
        return fd
    }
}

/// read(2), under a name of its own: inside `SmallFile.read` the bare name
/// means the method, and the C library's module is Glibc or Musl.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, buffer, count) }
