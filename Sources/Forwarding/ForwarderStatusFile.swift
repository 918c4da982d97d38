import Configuration
import DurableFile
import FoundationEssentials
import Readings
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
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
        /// When `connected` last changed, or the start, on the wall clock
        /// as it read then.
        public var since: Date
        /// The same moment on CLOCK_BOOTTIME, in milliseconds, and the boot
        /// it belongs to: readers of the same boot take the age from these,
        /// so a step of the wall clock since (NTP's first answer after a
        /// boot at 1970) does not make it "connected for 56 years". Absent
        /// from files of older versions, and without a boot id.
        public var sinceBootMs: Int64?
        public var bootId: String?
        public var lastError: String?
        /// Records lost to retention before they were delivered, since start.
        public var gapRecords: UInt64
        /// Readings whose payload did not fit `[decode]`, since start
        /// (absent from older files).
        public var undecodableRecords: UInt64?

        public init(
            pid: Int32, running: Bool, broker: String, readingsDirectory: String, connected: Bool, since: Date,
            sinceBootMs: Int64? = nil, bootId: String? = nil, lastError: String?, gapRecords: UInt64,
            undecodableRecords: UInt64? = nil
        ) {
            self.undecodableRecords = undecodableRecords
            self.sinceBootMs = sinceBootMs
            self.bootId = bootId
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
        do throws(SmallFile.Failure) {
            try SmallFile.replace(path, with: bytes, durable: false)
        } catch {
            throw failure(error)
        }
    }

    /// The contents; nil when there is no file (the forwarder never ran here).
    public func read() throws(Failure) -> Contents? {
        let bytes: [UInt8]
        do throws(SmallFile.Failure) {
            guard let read = try SmallFile.read(path, limit: 1 << 20) else { return nil }
            bytes = read
        } catch where error.code == EACCES {
            throw Failure(description: "\(path): permission denied (root and members of group tether may read it)", code: EACCES)
        } catch {
            throw failure(error)
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

    /// How long ago `since` was: from boot time when the file is of this
    /// boot (`boot`: this boot's id and CLOCK_BOOTTIME now), else from the
    /// wall clock (`now`).
    public static func age(of contents: Contents, now: Date, boot: BootStamp?) -> Double {
        if let boot, let bootID = contents.bootId, bootID == boot.bootID, let since = contents.sinceBootMs {
            return Double(max(0, boot.sinceBootMilliseconds - since)) / 1000
        }
        return now.timeIntervalSince(contents.since)
    }

    /// Whether the process that wrote `contents` still runs (a forwarder
    /// killed with SIGKILL could not say so itself).
    public static func isAlive(_ contents: Contents) -> Bool {
        guard contents.running, contents.pid > 0 else { return false }
        return kill(contents.pid, 0) == 0 || errno == EPERM
    }

    private func failure(_ error: SmallFile.Failure) -> Failure {
        Failure(description: "cannot \(error.operation) (the forwarder's status): \(error.reason)", code: error.code)
    }
}
