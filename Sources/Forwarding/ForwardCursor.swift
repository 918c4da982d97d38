import Configuration
#if canImport(Glibc)
import Glibc
#endif

/// The forwarder's durable position: the last `seq` the broker acknowledged.
/// Stored as one decimal line in a file of its own, replaced atomically
/// (written to a temporary file, fsynced, renamed, the directory fsynced),
/// so that a crash leaves the old value or the new one, never a torn one.
public struct ForwardCursor: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    /// The cursor of `instance`'s forwarder in `stateDirectory`.
    public init(stateDirectory: String, instance: InstanceName) {
        path = stateDirectory + "/" + (instance == .default ? "cursor" : "\(instance).cursor")
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The stored seq; 0 when there is no file yet (nothing delivered).
    public func load() throws(Failure) -> UInt64 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return 0 }
            throw Failure(description: "\(path): cannot read the forwarding cursor: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { throw Failure(description: "\(path): the forwarding cursor is empty") }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).trimmingTrailingNewline
        guard let seq = UInt64(text) else {
            throw Failure(description: "\(path): the forwarding cursor holds \(text.debugDescription), not a seq; remove it to forward everything again")
        }
        return seq
    }

    /// Stores `seq` durably.
    public func store(_ seq: UInt64) throws(Failure) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o640)
        guard fd >= 0 else { throw failure("create \(temporary)") }
        let bytes = Array("\(seq)\n".utf8)
        let written = write(fd, bytes, bytes.count)
        let synced = written == bytes.count && fsync(fd) == 0
        let code = errno
        close(fd)
        guard synced else {
            errno = code
            throw failure("write \(temporary)")
        }
        guard rename(temporary, path) == 0 else { throw failure("rename \(temporary)") }
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let directoryFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }

    private func failure(_ what: String) -> Failure {
        Failure(description: "cannot \(what) (the forwarding cursor): \(String(cString: strerror(errno)))")
    }
}

extension String {
    var trimmingTrailingNewline: String {
        var text = Substring(self)
        while let last = text.last, last == "\n" || last == "\r" || last == " " { text = text.dropLast() }
        return String(text)
    }
}
