import Synchronization

extension EventLoop {
    /// Suspends the calling task for `duration` on this loop's timers.
    ///
    /// `Task.sleep` would do the same on the global executor's timer, whose
    /// firing wakes a libdispatch worker thread; once one has run,
    /// libdispatch's pool monitor wakes the process every second for good.
    /// A daemon whose tasks sleep here stays off that pool and wakes only for
    /// its own timers.
    ///
    /// Throws `CancellationError` as soon as the task is cancelled (and at
    /// once if it already was); the timer is then removed from the loop.
    public func sleep(for duration: Duration) async throws {
        let sleep = LoopSleep()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                guard sleep.wait(continuation) else { return }
                execute { [self] in
                    // Cancelled between the two: nothing to schedule.
                    guard sleep.isWaiting else { return }
                    sleep.timer = schedule(after: duration) { sleep.finish(cancelled: false) }
                }
            }
        } onCancel: {
            guard sleep.finish(cancelled: true) else { return }
            execute { [self] in
                if let timer = sleep.timer { cancelTimer(timer) }
            }
        }
    }

    /// A `Clock` whose `sleep` runs on this loop's timers (see `sleep(for:)`),
    /// for code written against a clock (a metrics writer, a watchdog).
    public var clock: EventLoopClock { EventLoopClock(loop: self) }
}

/// The monotonic clock, sleeping on an event loop's timers.
public struct EventLoopClock: Clock {
    public typealias Duration = Swift.Duration
    public typealias Instant = ContinuousClock.Instant

    let loop: EventLoop

    public var now: Instant { ContinuousClock.now }
    public var minimumResolution: Duration { .milliseconds(1) }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try await loop.sleep(for: ContinuousClock.now.duration(to: deadline))
    }
}

/// One sleeping task: its continuation is resumed exactly once, by the timer
/// or by cancellation, whichever comes first.
private final class LoopSleep: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Void, any Error>)
        case done
    }

    private let state = Mutex(State.idle)
    private let timerID = Mutex<EventLoop.TimerID?>(nil)

    var timer: EventLoop.TimerID? {
        get { timerID.withLock { $0 } }
        set { timerID.withLock { $0 = newValue } }
    }

    var isWaiting: Bool {
        state.withLock { if case .waiting = $0 { true } else { false } }
    }

    /// Parks `continuation`; false (and resumed, throwing) if the task was
    /// cancelled before it got here.
    func wait(_ continuation: CheckedContinuation<Void, any Error>) -> Bool {
        let parked = state.withLock { state -> Bool in
            guard case .idle = state else { return false }
            state = .waiting(continuation)
            return true
        }
        if !parked { continuation.resume(throwing: CancellationError()) }
        return parked
    }

    /// Resumes the task; false if it was resumed already. Cancellation before
    /// `wait` leaves `.done`, so `wait` throws at once.
    @discardableResult
    func finish(cancelled: Bool) -> Bool {
        let continuation = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            switch state {
            case .idle:
                state = .done
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .done:
                return nil
            }
        }
        guard let continuation else { return false }
        if cancelled { continuation.resume(throwing: CancellationError()) } else { continuation.resume() }
        return true
    }
}
