/// Several virtual loops on one `VirtualClock`, driven together by one
/// thread: the deterministic simulation's processes (bluetoothd's main
/// loop, the daemon's, the bus daemon's), each its own loop, exchanging work
/// through `execute` as real processes exchange messages through sockets.
///
/// Threading: confined to the thread that made it, which is the thread of
/// every loop it makes; `@unchecked Sendable` only so that hooks which run
/// on that thread (a simulated process freezing its own loop) may hold it.
///
/// Invariants:
/// - time moves only here, and only to the earliest instant at which some
///   loop has work (a timer due, or a frozen loop thawing), never past it:
///   everything due at an instant runs at that instant, whichever loop holds it;
/// - at one instant the loops are driven in the order they were made, again
///   and again until none of them has anything runnable, so work one loop
///   hands to another runs at the instant it was handed over;
/// - a frozen loop runs nothing until it thaws (a process stopped with
///   SIGSTOP, or a hung main loop): work handed to it waits, and its timers
///   fire late, at the thaw; a removed loop never runs again (a killed process).
public final class VirtualLoops: @unchecked Sendable {
    public let clock: VirtualClock
    private var members: [Member] = []

    private struct Member {
        let loop: EventLoop
        var frozenUntil: MonotonicInstant?
    }

    public init(start: MonotonicInstant = MonotonicInstant(nanoseconds: 1_000_000_000)) {
        clock = VirtualClock(start: start)
    }

    public var now: MonotonicInstant { clock.now }

    /// A new loop on this clock, driven with the others from now on.
    public func makeLoop(named name: String) -> EventLoop {
        let loop = EventLoop(virtualNamed: name, clock: clock)
        members.append(Member(loop: loop, frozenUntil: nil))
        return loop
    }

    /// `loop` is never driven again: what it holds (timers, work, tasks
    /// suspended on it) is abandoned, as a killed process's is.
    public func remove(_ loop: EventLoop) {
        members.removeAll { $0.loop === loop }
    }

    /// `loop` runs nothing until `instant`.
    public func freeze(_ loop: EventLoop, until instant: MonotonicInstant) {
        guard let index = members.firstIndex(where: { $0.loop === loop }) else { return }
        members[index].frozenUntil = instant
    }

    public func isFrozen(_ loop: EventLoop) -> Bool {
        members.first { $0.loop === loop }?.frozenUntil != nil
    }

    /// Runs every loop that is not frozen until none has anything runnable
    /// at `now`; returns the turns run in all.
    @discardableResult
    public func runUntilIdle() -> Int {
        var total = 0
        while true {
            var turns = 0
            // Work may make or remove loops (a process started or killed):
            // each round drives the loops there were at its start that are
            // still members.
            for loop in members.map(\.loop) {
                guard let index = members.firstIndex(where: { $0.loop === loop }) else { continue }
                if let until = members[index].frozenUntil {
                    guard until <= clock.now else { continue }
                    members[index].frozenUntil = nil
                }
                turns += loop.runUntilIdle()
            }
            total += turns
            if turns == 0 { return total }
        }
    }

    /// The earliest instant at which a loop has work: a timer of a running
    /// loop, or a frozen loop's thaw. Nil: nothing will ever run again.
    public var nextDeadline: MonotonicInstant? {
        var earliest: MonotonicInstant?
        for member in members where !member.loop.isStopped {
            let next = member.frozenUntil ?? member.loop.nextTimerDeadline
            if let next, earliest.map({ next < $0 }) ?? true { earliest = next }
        }
        return earliest
    }

    /// Runs what is runnable now, then moves the clock from deadline to
    /// deadline up to `instant`, running what is due at each; ends with the
    /// clock at `instant` (or at `now`, if `instant` is in its past).
    public func advance(to instant: MonotonicInstant) {
        runUntilIdle()
        while let next = nextDeadline, next <= instant {
            clock.move(to: next)
            runUntilIdle()
        }
        clock.move(to: instant)
        runUntilIdle()
    }

    /// Runs until the next instant at which anything is due, and that
    /// instant's work; returns false when nothing is left, or the next is
    /// past `limit`.
    public func step(notAfter limit: MonotonicInstant) -> Bool {
        runUntilIdle()
        guard let next = nextDeadline, next <= limit else { return false }
        clock.move(to: next)
        runUntilIdle()
        return true
    }
}
