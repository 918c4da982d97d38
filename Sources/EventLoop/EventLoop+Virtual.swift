#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CEventLoop
import Synchronization

/// A virtual loop: the same executor, timers, descriptors and turn-end hooks
/// as a real one, on virtual time and driven by its caller. The
/// deterministic simulation runs the daemon's own link layer on one.
///
/// Threading: the thread that made the loop is the loop's thread for good
/// (`inLoop` and `checkIsolated` pass there, and only there); it drives the
/// loop, in between it may schedule timers and add watches as on a real
/// loop's thread. `execute` and `enqueue` may still come from any thread:
/// the work waits for the next drive (`executeAndWait` from another thread
/// blocks until then; from the loop's own thread it is refused, as on a
/// real loop).
///
/// Invariants:
/// - nothing runs unless the loop is driven: Swift jobs (tasks preferring
///   the loop, actors whose executor it is), `execute` closures, timers and
///   hooks all run inside `runUntilIdle` and `advance`, in a deterministic
///   order: submitted work in submission order, then the due timers by
///   deadline (ties in an order fixed by the timers' ids), then the
///   turn-end hooks in the order they were added;
/// - `now` moves only forward, and only in `advance`: each timer runs with
///   `now` equal to its deadline (or later, for a deadline already past when
///   it was scheduled), and work a timer submits runs at that same instant;
/// - a turn runs only when something is runnable: an idle virtual loop runs
///   no turn and no hook, however often it is driven;
/// - the loop never sleeps: load moderation (`moderation`, `noteBusy`) is
///   ignored, since virtual time does not pass while work runs.
///
/// Descriptors: watches work as on a real loop, except that a virtual loop
/// looks at them without waiting (epoll_wait with timeout 0) at the start of
/// each turn. A descriptor fed by the driving thread itself (one end of a
/// socketpair written before the loop is driven) is therefore seen in the
/// same drive, deterministically; one fed by another thread or process is
/// seen whenever its data happens to have arrived, which no virtual clock
/// orders: a simulation that needs determinism feeds its descriptors itself.
extension EventLoop {
    /// A virtual loop at `start`, driven by the calling thread (see above).
    /// Keep it alive while tasks prefer it: a task holds its executor
    /// unowned.
    public convenience init(virtualNamed name: String, startingAt start: MonotonicInstant = MonotonicInstant(nanoseconds: 0)) {
        self.init(name: name, virtualClock: VirtualClock(start: start))
    }

    /// A virtual loop on `clock`, which other virtual loops may share
    /// (`VirtualLoops` drives such a group: drive the loops of a shared clock
    /// through it, not with `advance`, which moves the clock under the others).
    public convenience init(virtualNamed name: String, clock: VirtualClock) {
        self.init(name: name, virtualClock: clock)
    }

    /// The earliest deadline of the timers scheduled, nil when there are
    /// none: on a virtual loop, where the next `advance` that has work to do
    /// goes. Loop thread only.
    public var nextTimerDeadline: MonotonicInstant? {
        checkIsolated()
        return earliestTimerDeadline()
    }

    /// Runs turns while anything is runnable at `now`: submitted work, the
    /// timers due (deadline ≤ `now`), ready descriptors, each turn ending
    /// with the turn-end hooks. Returns the number of turns run (0: the loop
    /// was idle). Virtual loops only, on their thread, not from work the
    /// loop runs.
    @discardableResult
    public func runUntilIdle() -> Int {
        precondition(isVirtual, "runUntilIdle drives a virtual loop; \(name) runs on its own thread")
        checkIsolated()
        precondition(!driving, "the virtual loop \(name) driven from work it runs")
        driving = true
        defer { driving = false }
        let executor = asUnownedSerialExecutor()
        let taskExecutor = asUnownedTaskExecutor()
        var turns = 0
        while true {
            let handled = handleReadyDescriptors()
            let (stopped, submitted) = inbox.withLock { ($0.stopRequested, !$0.work.isEmpty) }
            guard !stopped, handled || submitted || timerDue else { return turns }
            runSubmittedWork(executor, taskExecutor)
            runDueTimers()
            runTurnEndHooks()
            busyThisTurn = false
            turns += 1
        }
    }

    /// Moves `now` forward to `instant`, stopping at each timer's deadline on
    /// the way to run what is due there (`runUntilIdle`), then at `instant`.
    /// An `instant` before `now` moves nothing: virtual time never goes
    /// back; what is runnable now still runs. Virtual loops only, on their
    /// thread, not from work the loop runs.
    public func advance(to instant: MonotonicInstant) {
        runUntilIdle()
        while !isStopped, let next = earliestTimerDeadline(), next <= instant {
            moveNow(to: next)
            runUntilIdle()
        }
        moveNow(to: instant)
        runUntilIdle()
    }

    /// `advance(to: now + duration)`.
    public func advance(by duration: Duration) {
        advance(to: now + duration)
    }

    // MARK: Private

    private var timerDue: Bool {
        earliestTimerDeadline().map { $0 <= now } ?? false
    }

    var isStopped: Bool {
        inbox.withLock { $0.stopRequested }
    }

    /// Forward only.
    private func moveNow(to instant: MonotonicInstant) {
        virtualClock?.move(to: instant)
    }

    /// Looks at the watched descriptors without waiting and calls the
    /// handlers of the ready ones; returns whether any was.
    private func handleReadyDescriptors() -> Bool {
        guard !watchesByFD.isEmpty else { return false }
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        let count = events.withUnsafeMutableBufferPointer { buffer in
            epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), 0)
        }
        guard count > 0 else { return false }
        handleReady(events, count: Int(count))
        return true
    }
}
