import Configuration
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a running forwarder tells `tether status`: a small JSON file beside
/// its cursor, replaced (written to a temporary file, renamed) whenever the
/// broker connection changes, an error happens or a gap is found; and at
/// stop, with `running` false.
///
/// It is runtime state, not durable state: no fsync. What moves with every
/// acknowledgement (the acknowledged seq) is read from the cursor instead,
/// so this file is written a few times an hour, not per message. A
/// forwarder killed with SIGKILL leaves `running` true: readers check `pid`.
public struct ForwarderStatusFile: Sendable {
    public struct Contents: Codable, Sendable, Equatable {
        public var pid: Int32
        public var running: Bool
        /// host:port
        public var broker: String
        public var readingsDirectory: String
        public var connected: Bool
        /// When `connected` last changed, or the start.
        public var since: Date
        public var lastError: String?
        /// Records lost to retention before they were delivered, since start.
        public var gapRecords: UInt64

        public init(
            pid: Int32, running: Bool, broker: String, readingsDirectory: String, connected: Bool, since: Date,
            lastError: String?, gapRecords: UInt64
        ) {
            self.pid = pid
            self.running = running
            self.broker = broker
            self.readingsDirectory = readingsDirectory
            self.connected = connected
            self.since = since
            self.lastError = lastError
            self.gapRecords = gapRecords
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        /// The errno, when a system call failed (EACCES: not in group tether).
        public let code: Int32?
    }

    public let path: String

    public init(path: String) { self.path = path }

    /// The file of `instance`'s forwarder in `stateDirectory`.
    public init(stateDirectory: String, instance: InstanceName) {
        path = stateDirectory + "/" + (instance == .default ? "status.json" : "\(instance).status.json")
    }

    public func write(_ contents: Contents) throws(Failure) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard var bytes = try? Array(encoder.encode(contents)) else {
            throw Failure(description: "\(path): cannot encode the forwarder's status", code: nil)
        }
        bytes.append(UInt8(ascii: "\n"))
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o640)
        guard fd >= 0 else { throw failure("create \(temporary)") }
        let written = Glibc.write(fd, bytes, bytes.count)
        let code = errno
        close(fd)
        guard written == bytes.count else {
            errno = written < 0 ? code : ENOSPC
            throw failure("write \(temporary)")
        }
        guard rename(temporary, path) == 0 else { throw failure("rename \(temporary)") }
    }

    /// The contents; nil when there is no file (the forwarder never ran here).
    public func read() throws(Failure) -> Contents? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            if errno == EACCES {
                throw Failure(description: "\(path): permission denied (root and members of group tether may read it)", code: EACCES)
            }
            throw failure("read \(path)")
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = Glibc.read(fd, &chunk, chunk.count)
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw failure("read \(path)") }
            if count == 0 || bytes.count > 1 << 20 { break }
            bytes += chunk.prefix(count)
        }
        let data = Data(bytes)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do {
            return try decoder.decode(Contents.self, from: data)
        } catch {
            throw Failure(description: "\(path): not a forwarder status file: \(error)", code: nil)
        }
    }

    /// Whether the process that wrote `contents` still runs (a forwarder
    /// killed with SIGKILL could not say so itself).
    public static func isAlive(_ contents: Contents) -> Bool {
        guard contents.running, contents.pid > 0 else { return false }
        return kill(contents.pid, 0) == 0 || errno == EPERM
    }

    private func failure(_ what: String) -> Failure {
        let code = errno
        return Failure(description: "cannot \(what) (the forwarder's status): \(String(cString: strerror(code)))", code: code)
    }
}
