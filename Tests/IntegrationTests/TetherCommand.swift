import ChildProcess
import Foundation
import TestSupport

/// Runs the built `tether` binary as a client command (status, reconnect,
/// scan…) against a test bus, optionally as another user through setpriv.
struct TetherCommand {
    struct Result {
        var status: Int32?
        var stdout: String
        var stderr: String
        var all: String { "exit \(status.map(String.init) ?? "signal")\nstdout:\n\(stdout)\nstderr:\n\(stderr)" }
    }

    /// Who runs the command: this process's user, or another via setpriv.
    enum User {
        case current
        /// `setpriv --reuid NAME --regid GROUP --init-groups`: the user with its groups.
        case named(String, group: String)
        /// `setpriv --reuid NAME --regid GROUP --clear-groups`: no supplementary groups.
        case bare(String, group: String)
    }

    static let setpriv = "/usr/bin/setpriv"

    let directory: URL
    let busAddress: String

    func run(_ arguments: [String], as user: User = .current, timeout: Duration = .seconds(30),
             extraEnvironment: [String: String] = [:]) async throws -> Result {
        let id = UUID().uuidString.prefix(8)
        let out = directory.appendingPathComponent("cmd-\(id).out").path
        let err = directory.appendingPathComponent("cmd-\(id).err").path
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = busAddress
        environment.merge(extraEnvironment) { $1 }
        let (executable, argv): (String, [String]) = switch user {
        case .current: (DaemonProcessTests.tetherPath, arguments)
        case .named(let name, let group):
            (Self.setpriv, ["--reuid", name, "--regid", group, "--init-groups", DaemonProcessTests.tetherPath] + arguments)
        case .bare(let name, let group):
            (Self.setpriv, ["--reuid", name, "--regid", group, "--clear-groups", DaemonProcessTests.tetherPath] + arguments)
        }
        let process = try ChildProcess(
            executable: executable, arguments: argv, environment: environment, stdoutPath: out, stderrPath: err
        )
        // Poll without blocking a thread: the simulator runs in this process.
        let deadline = ContinuousClock.now + timeout
        var status: Int32?
        while status == nil, ContinuousClock.now < deadline {
            status = process.poll()
            if status == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        if status == nil { status = process.wait(timeout: .zero) }
        let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return Result(status: status.flatMap(ChildProcess.exitCode), stdout: read(out), stderr: read(err))
    }
}
