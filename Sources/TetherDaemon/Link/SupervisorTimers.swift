import EventLoop
import LinkSupervisor

/// The supervisor's timers as the loop's monotonic timers: at most one of
/// each kind runs; restarting one cancels the previous.
///
/// Threading: confined to the loop; `@unchecked Sendable` only so that bus
/// replies, which run on that loop, may capture it.
final class SupervisorTimers: @unchecked Sendable {
    private let loop: EventLoop
    private var running: [SupervisorTimer: EventLoop.TimerID] = [:]

    init(loop: EventLoop) {
        self.loop = loop
    }

    func start(_ timer: SupervisorTimer, after delay: Duration, fire: @escaping (SupervisorTimer) -> Void) {
        cancel(timer)
        running[timer] = loop.schedule(after: delay) { [self] in
            running[timer] = nil
            fire(timer)
        }
    }

    func cancel(_ timer: SupervisorTimer) {
        if let id = running.removeValue(forKey: timer) { loop.cancelTimer(id) }
    }

    func cancelAll() {
        for (_, id) in running { loop.cancelTimer(id) }
        running = [:]
    }
}
