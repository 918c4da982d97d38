import DurationUnits
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CProcess
import Synchronization

/// A child process started with posix_spawn, with its stdout optionally on a pipe.
///
/// Foundation's `Process` reaps children from a helper thread and its
/// `waitUntilExit` spins a run loop; for a daemon's helpers and the test
/// harness, a plain pid with `kill` and `waitpid` is simpler and cannot hang
/// on a missed SIGCHLD.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    /// The read end of the child's stdout when `captureOutput` was set
    /// (closed when this object goes).
    public let outputDescriptor: Int32?
    /// The child's wait status once reaped.
    private let exitStatus = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments`. stdin is /dev/null; stderr is
    /// inherited unless `stderrPath` names a file to append to, or
    /// `stderrToOutput` sends it down the pipe with stdout.
    public init(
        executable: String, arguments: [String], environment: [String: String]? = nil,
        captureOutput: Bool = false, stdoutPath: String? = nil, stderrPath: String? = nil, stderrToOutput: Bool = false
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)

        var pipeFDs: [Int32] = [-1, -1]
        if captureOutput {
            guard pipe(&pipeFDs) == 0 else { throw ChildProcessError.spawnFailed(executable, errno) }
            posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
            if stderrToOutput { posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 2) }
            posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
            posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
        } else if let stdoutPath {
            posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }
        if let stderrPath {
            posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in env { free(pointer) } }

        // The child inherits the spawning thread's signal mask, and Dispatch's
        // worker threads block most signals: without a clean mask the child
        // would ignore SIGTERM.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, argv, env)
        if captureOutput { close(pipeFDs[1]) }
        guard result == 0 else {
            if captureOutput { close(pipeFDs[0]) }
            throw ChildProcessError.spawnFailed(executable, result)
        }
        pid = child
        outputDescriptor = captureOutput ? pipeFDs[0] : nil
    }

    deinit {
        if let outputDescriptor { close(outputDescriptor) }
    }

    /// Reads the child's stdout up to the first newline (blocking; start-up only).
    public func readLine() -> String? {
        guard let outputDescriptor else { return nil }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let count = read(outputDescriptor, &byte, 1)
            if count < 0, errno == EINTR { continue }
            if count <= 0 || byte == 0x0A { break }
            line.append(byte)
        }
        return line.isEmpty ? nil : String(decoding: line, as: UTF8.self)
    }

    public func signal(_ signal: Int32) {
        exitStatus.withLock { status in
            if status == nil { kill(pid, signal) }
        }
    }

    /// Reaps the child if it has exited; returns its wait status, or nil if running.
    public func poll() -> Int32? {
        exitStatus.withLock { exitStatus in
            if let exitStatus { return exitStatus }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { exitStatus = status }
            return exitStatus
        }
    }

    public var isRunning: Bool { poll() == nil }

    /// Waits for the child to exit, at most `timeout`, then SIGKILLs it.
    /// Polls with short sleeps: only tests and the demo use this, never the daemon.
    @discardableResult
    public func wait(timeout: Duration = .seconds(10)) -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let status = poll() { return status }
            usleep(10_000)
        }
        signal(SIGKILL)
        return exitStatus.withLock { exitStatus in
            if let exitStatus { return exitStatus }
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            exitStatus = status
            return status
        }
    }

    /// Waits for the child to exit, at most `timeout`, blocked in poll(2) on
    /// its pidfd (no polling loop: for the daemon's blocking-work thread);
    /// SIGKILLs it then. The wait status, or nil when it had to be killed.
    public func waitBlocking(timeout: Duration) -> Int32? {
        let fd = tether_pidfd_open(pid)
        if fd >= 0 {
            defer { close(fd) }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: timeout.wholeMilliseconds)
            var ready: Int32
            repeat { ready = systemPoll(&entry, 1, milliseconds) } while ready < 0 && errno == EINTR
            if ready > 0, let status = poll() { return status }
            if ready == 0 {
                signal(SIGKILL)
                _ = wait(timeout: .seconds(1))
                return nil
            }
        }
        // No pidfd (a kernel before 5.3) or it failed: the polling wait.
        let status = wait(timeout: timeout)
        return (status & 0x7f) == SIGKILL ? nil : status
    }

    /// SIGTERM, then SIGKILL after `grace`.
    @discardableResult
    public func terminate(grace: Duration = .seconds(5)) -> Int32 {
        signal(SIGTERM)
        return wait(timeout: grace)
    }

    /// The exit code if the child exited normally.
    public static func exitCode(_ status: Int32) -> Int32? {
        (status & 0x7f) == 0 ? (status >> 8) & 0xff : nil
    }
}

public enum ChildProcessError: Error, CustomStringConvertible {
    case spawnFailed(String, Int32)
    public var description: String {
        switch self {
        case .spawnFailed(let path, let code): "cannot start \(path): \(String(cString: strerror(code)))"
        }
    }
}

/// poll(2), named apart from `ChildProcess.poll()`.
private func systemPoll(_ entries: UnsafeMutablePointer<pollfd>, _ count: nfds_t, _ timeout: Int32) -> Int32 {
    poll(entries, count, timeout)
}
