import ChildProcess
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A private `dbus-daemon` in a directory of its own, for the simulator, the
/// demo and the tests. It listens on `DIR/bus` and allows everything; the
/// system-bus policy tests start their own with a real policy instead.
public final class BusDaemonProcess: @unchecked Sendable {
    public let address: String
    public let directory: URL
    private let process: ChildProcess

    /// Starts the daemon and returns once it listens.
    /// - Parameter configFile: a config to use instead of the permissive default
    ///   (it must listen on `unix:path=DIR/bus`).
    public init(directory: URL, configFile: URL? = nil) throws {
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("bus").path
        try? FileManager.default.removeItem(atPath: socket)
        let config = configFile ?? directory.appendingPathComponent("bus.conf")
        if configFile == nil {
            // Not `atomically`: Foundation on Linux leaves a
            // /tmp/TemporaryDirectory.* behind for every atomic write.
            try BusDaemonProcess.permissiveConfig(socket: socket).write(to: config, atomically: false, encoding: .utf8)
        }
        let executable = ["/usr/bin/dbus-daemon", "/bin/dbus-daemon"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        guard let executable else {
            throw BusDaemonError.notInstalled
        }
        process = try ChildProcess(
            executable: executable,
            arguments: ["--config-file=\(config.path)", "--nofork", "--nopidfile", "--print-address=1"],
            captureOutput: true,
            stderrPath: directory.appendingPathComponent("dbus-daemon.log").path
        )
        // The daemon prints its address once it listens: read that one line.
        guard let text = process.readLine(), !text.isEmpty else {
            process.terminate()
            throw BusDaemonError.didNotStart
        }
        address = String(text)
    }

    public var pid: Int32 { process.pid }

    /// Stops the daemon (SIGTERM) and waits for it.
    public func stop() {
        process.terminate()
    }

    deinit { stop() }

    static func permissiveConfig(socket: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(socket)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """
    }
}

public enum BusDaemonError: Error, CustomStringConvertible {
    case notInstalled, didNotStart
    public var description: String {
        switch self {
        case .notInstalled: "dbus-daemon is not installed (Debian package dbus-daemon)"
        case .didNotStart: "dbus-daemon did not print its address"
        }
    }
}
