#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin POSIX wrappers for the readings log: retry on EINTR, loop on short
/// transfers, and turn failures into `ReadingLogError`s naming the path.
enum LogFileSystem {
    /// write(2) as the log calls it: returns the byte count, or -errno on failure.
    /// Replaceable per log so tests can simulate a full or failing disk.
    typealias WriteCall = @Sendable (_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int

    static let systemWrite: WriteCall = { fd, bytes in
        let result = write(fd, bytes.baseAddress, bytes.count)
        return result >= 0 ? result : -Int(errno)
    }

    /// ftruncate(2) as a rollback calls it: 0, or -errno on failure.
    /// Replaceable per log so tests can simulate a rollback that cannot cut.
    typealias TruncateCall = @Sendable (_ fd: Int32, _ size: Int64) -> Int32

    static let systemTruncate: TruncateCall = { fd, size in
        ftruncate(fd, off_t(size)) == 0 ? 0 : -errno
    }

    struct Entry {
        var path: String
        var firstSeq: UInt64
    }

    static func failure(_ operation: String, _ path: String, _ code: Int32 = errno) -> ReadingLogError {
        ReadingLogError(operation: operation, path: path, code: code)
    }

    /// `mkdir -p` with `mode` for every directory it creates.
    static func makeDirectories(_ path: String, mode: mode_t) throws {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, mode) != 0, errno != EEXIST {
                throw failure("mkdir", prefix)
            }
        }
        var info = stat()
        guard stat(path, &info) == 0 else { throw failure("stat", path) }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { throw failure("mkdir", path, ENOTDIR) }
    }

    /// Our log files in `directory`, oldest first.
    static func listLogFiles(in directory: String) throws -> [Entry] {
        guard let handle = opendir(directory) else { throw failure("opendir", directory) }
        defer { closedir(handle) }
        var entries: [Entry] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if let firstSeq = LogFileName.firstSeq(of: name) {
                entries.append(Entry(path: directory + "/" + name, firstSeq: firstSeq))
            }
        }
        return entries.sorted { $0.firstSeq < $1.firstSeq }
    }

    static func openFile(_ path: String, flags: Int32, mode: mode_t = 0o640) throws -> Int32 {
        while true {
            let fd = open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno != EINTR { throw failure("open", path) }
        }
    }

    /// How many names the open file has: 0 once it was removed (its
    /// descriptor still reads and writes a file nobody else can open).
    static func linkCount(of fd: Int32, path: String) throws -> Int {
        Int(try status(of: fd, path: path).st_nlink)
    }

    /// Copies the first `count` bytes of the file open as `source` to `target`.
    static func copy(_ count: Int64, from source: Int32, to target: Int32, path: String) throws {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var offset: Int64 = 0
        while offset < count {
            let wanted = Int(min(Int64(chunk.count), count - offset))
            let got = chunk.withUnsafeMutableBytes { pread(source, $0.baseAddress, wanted, off_t(offset)) }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { throw failure("read back", path, got == 0 ? EIO : errno) }
            try writeAll(target, Array(chunk[0..<got]), path: path, using: systemWrite)
            offset += Int64(got)
        }
    }

    static func size(of fd: Int32, path: String) throws -> Int64 {
        Int64(try status(of: fd, path: path).st_size)
    }

    /// fstat(2) of the open file, its failure naming `path`.
    private static func status(of fd: Int32, path: String) throws -> stat {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("fstat", path) }
        return info
    }

    /// Writes all of `bytes`, continuing after short writes; a failure may leave a
    /// prefix written, which the caller rolls back.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String, using call: WriteCall) throws {
        try bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let result = call(fd, UnsafeRawBufferPointer(rebasing: buffer[offset...]))
                if result > 0 {
                    offset += result
                } else if result == 0 {
                    throw failure("write", path, EIO)  // no progress and no error: do not spin
                } else if result != -Int(EINTR) {
                    throw failure("write", path, Int32(truncatingIfNeeded: -result))
                }
            }
        }
    }

    /// Reads exactly `count` bytes at `offset` (fewer only at end of file).
    static func read(_ fd: Int32, offset: Int64, count: Int, path: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        try bytes.withUnsafeMutableBytes { buffer in
            while done < count {
                let result = pread(fd, buffer.baseAddress?.advanced(by: done), count - done, off_t(offset) + off_t(done))
                if result > 0 {
                    done += result
                } else if result == 0 {
                    break
                } else if errno != EINTR {
                    throw failure("read", path)
                }
            }
        }
        return Array(bytes.prefix(done))
    }

    static func readAll(_ path: String) throws -> [UInt8] {
        let fd = try openFile(path, flags: O_RDONLY)
        defer { close(fd) }
        let byteCount = try size(of: fd, path: path)
        return try read(fd, offset: 0, count: Int(byteCount), path: path)
    }

    static func truncate(
        _ fd: Int32, to size: Int64, path: String, using call: TruncateCall = systemTruncate
    ) throws {
        while true {
            let result = call(fd, size)
            if result == 0 { return }
            if result != -EINTR { throw failure("ftruncate", path, -result) }
        }
    }

    static func sync(_ fd: Int32, path: String) throws {
        while fsync(fd) != 0 {
            if errno != EINTR { throw failure("fsync", path) }
        }
    }

    /// Makes file creations, renames and deletions in `directory` durable.
    static func syncDirectory(_ directory: String) throws {
        let fd = try openFile(directory, flags: O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try sync(fd, path: directory)
    }

    /// close(2); errors are ignored because the descriptor is gone either way on Linux.
    static func closeFile(_ fd: Int32) {
        _ = close(fd)
    }

    static func remove(_ path: String) throws {
        if unlink(path) != 0, errno != ENOENT { throw failure("unlink", path) }
    }
}
