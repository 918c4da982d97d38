import CEventLoop
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// SIGTERM and SIGINT (stop) and SIGHUP, read from a signalfd on an event
/// loop, so they arrive as ordinary events on the loop instead of
/// interrupting whatever thread runs, and without libdispatch's signal
/// sources and the worker threads they run on.
///
/// A signalfd sees a signal only while every thread blocks it, so
/// `takeOver()` must run first thing in `main`, before any thread starts:
/// threads inherit the mask (children get a clean one from `ChildProcess`).
///
/// A daemon also must not die of the two signals whose default action ends
/// it for no reason of its own: SIGPIPE (a write to a pipe or socket whose
/// reader went: the write's EPIPE says it), and SIGHUP, which an operator
/// sends expecting a reload. systemd counts a death by either as a clean
/// exit, so `Restart=on-failure` would not bring the daemon back, and the
/// dongle would fall asleep. SIGPIPE is ignored; SIGHUP is handed to
/// `onHangup` each time, or dropped.
public enum TerminationSignal {
    private static let observed: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Blocks the observed signals in the calling thread and every thread
    /// it starts from now on, and ignores SIGPIPE. Call before any thread
    /// starts (the first thing `main` does), in a process that will `wait`.
    public static func takeOver() {
        signal(SIGPIPE, SIG_IGN)
        var set = observedSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    private static func observedSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for number in observed { sigaddset(&set, number) }
        return set
    }

    /// Waits on `loop` for SIGTERM or SIGINT and returns its name; nil if
    /// the task was cancelled first. Throws when no signalfd can be made
    /// (out of descriptors or memory): the signals stay blocked, so a caller
    /// that went on would be deaf to `systemctl stop`.
    public static func wait(
        on loop: EventLoop, onHangup: (@Sendable () -> Void)? = nil
    ) async throws(Unavailable) -> String? {
        // In a process that did not take the signals over (a test running
        // the daemon in-process) a write to a closed socket must still not kill it.
        signal(SIGPIPE, SIG_IGN)
        let received = await LoopWait<Result<String, Unavailable>>(on: loop).value { wait in
            var set = observedSet()
            let fd = signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC))
            guard fd >= 0 else {
                wait.resume(.failure(Unavailable(errno: errno)))
                return {}
            }
            let watch = loop.watch(fd, interest: .readable) { _ in
                if let name = readSignals(fd, onHangup: onHangup) { wait.resume(.success(name)) }
            }
            return {
                loop.removeWatch(watch)
                close(fd)
            }
        }
        return try received?.get()
    }

    /// Reads what the signalfd holds: the name of the first SIGTERM or
    /// SIGINT, or nil; each SIGHUP goes to `onHangup`.
    private static func readSignals(_ fd: Int32, onHangup: (@Sendable () -> Void)?) -> String? {
        var info = signalfd_siginfo()
        let size = MemoryLayout<signalfd_siginfo>.size
        while withUnsafeMutableBytes(of: &info, { read(fd, $0.baseAddress, size) }) == size {
            switch Int32(bitPattern: info.ssi_signo) {
            case SIGTERM: return "SIGTERM"
            case SIGINT: return "SIGINT"
            case SIGHUP: onHangup?()
            default: break
            }
        }
        return nil
    }

    /// No signalfd could be made.
    public struct Unavailable: Error, CustomStringConvertible {
        public let errno: Int32
        public var description: String { "cannot read SIGTERM and SIGINT: signalfd: \(String(cString: strerror(errno)))" }
    }
}
