import ChildProcess
import Foundation
import Glibc

/// Debian's `mosquitto` on a free loopback port, with a config written here,
/// in a directory of its own. `stop()` ends it; `start()` again reuses the
/// port and the persistence file, as a restarted broker would.
public final class MosquittoBroker: @unchecked Sendable {
    public let directory: URL
    public let port: Int
    private var process: ChildProcess?
    private let config: URL

    /// - Parameter passwords: user → password; with any, anonymous clients are refused.
    /// - Parameter extraConfig: lines for the listener (TLS files, say).
    public init(directory: URL, passwords: [String: String] = [:], persistence: Bool = true, extraConfig: [String] = []) throws {
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        port = try Self.freePort()
        config = directory.appendingPathComponent("mosquitto.conf")
        // Started as root, mosquitto drops to user mosquitto unless told
        // otherwise, and then cannot write its persistence file or log here.
        let user = getpwuid(getuid()).map { String(cString: $0.pointee.pw_name) } ?? "root"
        var lines = [
            "user \(user)",
            "listener \(port) 127.0.0.1",
            "persistence \(persistence)",
            // A persistent subscriber that reconnects after the forwarder
            // would otherwise lose what passed the default limit of 1000
            // queued messages while it was away.
            "max_queued_messages 0",
            "persistence_location \(directory.path)/",
            "log_dest file \(directory.path)/mosquitto.log",
        ]
        lines += extraConfig
        if passwords.isEmpty {
            lines.append("allow_anonymous true")
        } else {
            let file = directory.appendingPathComponent("passwords")
            try passwords.map { "\($0.key):\($0.value)" }.joined(separator: "\n").write(to: file, atomically: false, encoding: .utf8)
            let hash = try ChildProcess(executable: "/usr/bin/mosquitto_passwd", arguments: ["-U", file.path])
            guard hash.wait() == 0 else { throw BrokerError.passwordFile }
            lines += ["allow_anonymous false", "password_file \(file.path)"]
        }
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: false, encoding: .utf8)
        try start()
    }

    /// Starts the broker and returns once it accepts connections.
    public func start() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/mosquitto") else { throw BrokerError.notInstalled }
        process = try ChildProcess(executable: "/usr/sbin/mosquitto", arguments: ["-c", config.path])
        for _ in 0..<200 {
            if Self.accepts(port: port) { return }
            usleep(10_000)
        }
        throw BrokerError.didNotStart
    }

    public func stop() {
        _ = process?.terminate()
        process = nil
    }

    deinit { stop() }

    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A port the kernel had free a moment ago.
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BrokerError.noPort }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw BrokerError.noPort }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    public enum BrokerError: Error, CustomStringConvertible {
        case notInstalled, didNotStart, noPort, passwordFile
        public var description: String {
            switch self {
            case .notInstalled: "mosquitto is not installed (Debian package mosquitto; `make deps` installs it)"
            case .didNotStart: "mosquitto did not accept connections within 2 s"
            case .noPort: "no free loopback port"
            case .passwordFile: "mosquitto_passwd failed"
            }
        }
    }
}

/// `mosquitto_sub` collecting what arrives on a topic, one line per message.
public final class MosquittoSubscriber: @unchecked Sendable {
    private let process: ChildProcess
    public let output: URL

    public init(port: Int, topic: String, directory: URL, clientID: String = "test-subscriber") throws {
        output = directory.appendingPathComponent("sub-\(clientID).txt")
        process = try ChildProcess(
            executable: "/usr/bin/mosquitto_sub",
            arguments: ["-h", "127.0.0.1", "-p", String(port), "-t", topic, "-q", "1", "-i", clientID, "-c", "-v"],
            stdoutPath: output.path
        )
    }

    /// The lines received so far (`topic payload`).
    public var lines: [String] {
        ((try? String(contentsOf: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    public func stop() { _ = process.terminate() }
    deinit { stop() }
}
