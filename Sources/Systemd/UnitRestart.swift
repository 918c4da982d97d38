import ChildProcess
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Restarts a systemd unit and waits for the job: `systemctl restart
/// --no-ask-password UNIT`, which calls the manager's `RestartUnit` on the
/// system bus and follows the job to its end. As the service's own user,
/// polkit decides (the package's rule lets user `tether` restart exactly the
/// units its configs name as `reconnect.uart_unit`).
///
/// Blocks for up to `timeout`: call it from a blocking-work thread, never
/// an event loop. systemctl is killed at the deadline (the job, if systemd
/// took it, runs on).
public enum UnitRestart {
    public static let systemctl = "/usr/bin/systemctl"

    /// Why a restart did not happen, as one line for the journal.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
        /// systemd (polkit) refused the caller: "Interactive authentication
        /// required", "Access denied".
        public var refused: Bool = false
    }

    public static func restart(_ unit: String, timeout: Duration, systemctl: String = Self.systemctl) -> Result<Void, Failure> {
        let child: ChildProcess
        do {
            // stdout to /dev/null; stderr, where systemctl says why, captured.
            child = try ChildProcess(
                executable: systemctl, arguments: ["restart", "--no-ask-password", "--", unit],
                environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER": "", "LC_ALL": "C"],
                captureOutput: true, stderrToOutput: true)
        } catch {
            return .failure(Failure(description: "\(error)"))
        }
        guard let status = child.waitBlocking(timeout: timeout) else {
            return .failure(Failure(description: "systemctl restart \(unit) did not finish within \(timeout)"))
        }
        if ChildProcess.exitCode(status) == 0 { return .success(()) }
        let said = child.readLine() ?? "no message"
        let refused = said.contains("authentication required") || said.contains("Access denied")
        return .failure(Failure(
            description: "systemctl restart \(unit) failed (exit \(ChildProcess.exitCode(status).map(String.init) ?? "by a signal")): \(said)",
            refused: refused))
    }
}
