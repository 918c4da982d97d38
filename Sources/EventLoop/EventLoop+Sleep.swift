extension EventLoop {
    /// Suspends the calling task for `duration` on this loop's timers.
    ///
    /// `Task.sleep` would do the same on the global executor's timer, whose
    /// firing wakes a libdispatch worker thread; once one has run,
    /// libdispatch's pool monitor wakes the process every second for good.
    /// A daemon whose tasks sleep here stays off that pool and wakes only for
    /// its own timers. On a virtual loop the task resumes at exactly `now`
    /// plus `duration`, `now` being read when the loop arms the timer (the
    /// turn after the call, at the same virtual instant).
    ///
    /// Throws `CancellationError` as soon as the task is cancelled (and at
    /// once if it already was); the timer is then removed from the loop.
    public func sleep(for duration: Duration) async throws {
        let woke: Void? = await LoopWait<Void>(on: self).value { [self] wait in
            let timer = schedule(after: duration) { wait.resume(()) }
            return { [self] in cancelTimer(timer) }
        }
        guard woke != nil else { throw CancellationError() }
    }

    /// Suspends the calling task until `deadline` on the loop's clock (`now`),
    /// as `sleep(for:)` does.
    public func sleep(until deadline: MonotonicInstant) async throws {
        let woke: Void? = await LoopWait<Void>(on: self).value { [self] wait in
            let timer = schedule(at: deadline) { wait.resume(()) }
            return { [self] in cancelTimer(timer) }
        }
        guard woke != nil else { throw CancellationError() }
    }

    /// A `Clock` whose `now` is the loop's (`now`: virtual on a virtual
    /// loop) and whose `sleep` runs on this loop's timers (see
    /// `sleep(for:)`), for code written against a clock (a metrics writer, a
    /// watchdog).
    public var clock: EventLoopClock { EventLoopClock(loop: self) }
}

/// The loop's clock (the monotonic clock, or a virtual loop's time),
/// sleeping on the loop's timers.
public struct EventLoopClock: Clock {
    public typealias Duration = Swift.Duration
    public typealias Instant = MonotonicInstant

    let loop: EventLoop

    public var now: Instant { loop.now }
    public var minimumResolution: Duration { .milliseconds(1) }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try await loop.sleep(until: deadline)
    }
}
