import CEventLoop
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization

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
    /// the task was cancelled first.
    public static func wait(on loop: EventLoop, onHangup: (@Sendable () -> Void)? = nil) async -> String? {
        // In a process that did not take the signals over (a test running
        // the daemon in-process) a write to a closed socket must still not kill it.
        signal(SIGPIPE, SIG_IGN)
        var set = observedSet()
        let fd = signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC))
        guard fd >= 0 else { return nil }
        let waiter = SignalWaiter(fd: fd, loop: loop, onHangup: onHangup)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.start(continuation)
            }
        } onCancel: {
            waiter.finish(nil)
        }
    }
}

/// One `wait`: the signalfd's watch on the loop, and the continuation resumed once.
private final class SignalWaiter: Sendable {
    private struct State {
        var continuation: CheckedContinuation<String?, Never>?
        var watch: EventLoop.WatchID?
        var done = false
    }

    private let fd: Int32
    private let loop: EventLoop
    private let onHangup: (@Sendable () -> Void)?
    private let state = Mutex(State())

    init(fd: Int32, loop: EventLoop, onHangup: (@Sendable () -> Void)?) {
        self.fd = fd
        self.loop = loop
        self.onHangup = onHangup
    }

    func start(_ continuation: CheckedContinuation<String?, Never>) {
        let cancelled = state.withLock { state -> Bool in
            if state.done { return true }
            state.continuation = continuation
            return false
        }
        if cancelled {
            close(fd)
            return continuation.resume(returning: nil)
        }
        loop.execute { [self] in
            guard !state.withLock({ $0.done }) else { return }
            let watch = loop.watch(fd, interest: .readable) { [self] _ in readSignals() }
            state.withLock { $0.watch = watch }
        }
    }

    private func readSignals() {
        var info = signalfd_siginfo()
        let size = MemoryLayout<signalfd_siginfo>.size
        while withUnsafeMutableBytes(of: &info, { read(fd, $0.baseAddress, size) }) == size {
            switch Int32(bitPattern: info.ssi_signo) {
            case SIGTERM: return finish("SIGTERM")
            case SIGINT: return finish("SIGINT")
            case SIGHUP: onHangup?()
            default: break
            }
        }
    }

    /// Resumes the waiting task once; the descriptor is closed on the loop,
    /// after its watch is removed.
    func finish(_ name: String?) {
        let continuation = state.withLock { state -> CheckedContinuation<String?, Never>? in
            guard !state.done else { return nil }
            state.done = true
            defer { state.continuation = nil }
            return state.continuation
        }
        guard let continuation else { return }
        loop.execute { [self] in
            if let watch = state.withLock({ $0.watch }) { loop.removeWatch(watch) }
            close(fd)
        }
        continuation.resume(returning: name)
    }
}
