import CClock
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Tells its owner, on `loop`, each time the system clock is set (a step:
/// settimeofday, clock_settime, an NTP client's first jump; not a slew):
/// a timerfd on CLOCK_REALTIME with `TFD_TIMER_CANCEL_ON_SET`, so the loop
/// sleeps until a step happens. Used by `tether run` to log steps
/// (`ClockSetWatch`) and by `tether forward` to retry a TLS handshake that
/// failed because the clock was before the broker's certificate.
///
/// Threading: confined to `loop`; create and stop it there (checked:
/// `loop.checkIsolated()`), hence `@unchecked Sendable`, so that an async
/// caller's cleanup can hand it back to the loop. `onSet` and `onFailure`
/// run there.
///
/// Invariant: after `stop()` (or a failure) there is no watch and no fd.
public final class ClockSteps: @unchecked Sendable {
    /// The timerfd could not be made or read.
    public struct Unavailable: Error, CustomStringConvertible {
        public let errno: Int32
        public init(errno: Int32) { self.errno = errno }
        public var description: String { "cannot watch the system clock for steps: timerfd: \(String(cString: strerror(errno)))" }
    }

    private let loop: EventLoop
    private var fd: Int32
    private var watch: EventLoop.WatchID?

    /// Starts watching. `onFailure` is called once if reading the fd fails
    /// later (the watch is then closed).
    public init(
        loop: EventLoop, onSet: @escaping () -> Void, onFailure: @escaping (Unavailable) -> Void
    ) throws(Unavailable) {
        loop.checkIsolated()
        let fd = tether_clock_set_fd()
        guard fd >= 0 else { throw Unavailable(errno: -fd) }
        self.loop = loop
        self.fd = fd
        watch = loop.watch(fd, interest: .readable) { [unowned self] _ in
            let result = tether_clock_set_consume(self.fd)
            if result < 0 {
                stop()
                return onFailure(Unavailable(errno: -result))
            }
            if result == 1 { onSet() }
        }
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    public func stop() {
        loop.checkIsolated()
        if let watch { loop.removeWatch(watch) }
        watch = nil
        if fd >= 0 { close(fd) }
        fd = -1
    }
}
