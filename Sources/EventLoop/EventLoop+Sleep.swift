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
        let woke: Void? = await LoopWait<Void>(on: self).value { [self] wait in
            let timer = schedule(after: duration) { wait.resume(()) }
            return { [self] in cancelTimer(timer) }
        }
        guard woke != nil else { throw CancellationError() }
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
