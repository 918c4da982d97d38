import DurationUnits
import EventLoop
import Testing

/// A virtual loop: what `make dst` runs the daemon's link layer on. Each
/// test is synchronous: the test's thread makes the loop and drives it, and
/// nothing the loop holds runs anywhere else.
@Suite struct VirtualEventLoopTests {
    let start = MonotonicInstant(nanoseconds: 1_000_000_000)

    /// Milliseconds since `start`, for readable expectations.
    func ms(_ instant: MonotonicInstant) -> Int64 {
        start.duration(to: instant).wholeMilliseconds
    }

    @Test func timersFireInDeadlineOrderEachAtItsOwnInstant() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let fired = Shared<[String]>([])
        for (name, delay) in [("c", 60), ("a", 20), ("b1", 40), ("b2", 40)] {
            loop.schedule(after: .milliseconds(delay)) { [self] in fired.withLock { $0.append("\(name)@\(ms(loop.now))") } }
        }
        let cancelled = loop.schedule(after: .milliseconds(30)) { fired.withLock { $0.append("cancelled") } }
        loop.cancelTimer(cancelled)
        #expect(loop.now == start)
        #expect(loop.nextTimerDeadline == start + .milliseconds(20))

        #expect(loop.runUntilIdle() == 0, "nothing is due at the start")
        loop.advance(to: start + .milliseconds(59))
        // Equal deadlines fire in the order they were scheduled.
        #expect(fired.withLock { $0 } == ["a@20", "b1@40", "b2@40"])
        #expect(loop.now == start + .milliseconds(59))

        loop.advance(by: .seconds(1))
        #expect(fired.withLock { $0 } == ["a@20", "b1@40", "b2@40", "c@60"])
        #expect(loop.now == start + .milliseconds(1_059))
        #expect(loop.nextTimerDeadline == nil)
    }

    @Test func workSubmittedFromATimerRunsAtTheTimersInstant() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let seen = Shared<[String]>([])
        loop.schedule(after: .seconds(3)) { [self] in
            seen.withLock { $0.append("timer@\(ms(loop.now))") }
            loop.execute { [self] in seen.withLock { $0.append("closure@\(ms(loop.now))") } }
            Task(executorPreference: loop) { [self] in seen.withLock { $0.append("task@\(ms(loop.now))") } }
            loop.schedule(after: .zero) { [self] in seen.withLock { $0.append("zero-delay timer@\(ms(loop.now))") } }
        }
        loop.schedule(after: .seconds(4)) { [self] in seen.withLock { $0.append("later timer@\(ms(loop.now))") } }
        loop.advance(by: .seconds(10))
        #expect(seen.withLock { $0 } == [
            "timer@3000", "zero-delay timer@3000", "closure@3000", "task@3000", "later timer@4000",
        ])
    }

    @Test func virtualTimeNeverMovesBack() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        loop.advance(to: start + .seconds(5))
        #expect(loop.now == start + .seconds(5))

        let fired = Shared<[Int64]>([])
        // A deadline already past runs at the next drive, at the loop's now.
        loop.schedule(at: start + .seconds(2)) { [self] in fired.withLock { $0.append(ms(loop.now)) } }
        loop.advance(to: start + .seconds(1))
        #expect(loop.now == start + .seconds(5))
        #expect(fired.withLock { $0 } == [5_000])

        loop.advance(by: .seconds(-3))
        #expect(loop.now == start + .seconds(5))
        #expect(loop.clock.now == start + .seconds(5))
    }

    @Test func aTaskGroupInterleavesTheSameWayEveryRunAndOnlyWhileDriven() {
        let first = taskGroupTrace()
        let second = taskGroupTrace()
        #expect(first == second)
        // Every child ran every step, and the parent ended last.
        #expect(first.count == 4 * 3 + 2)
        #expect(first.first == "parent starts@0")
        #expect(first.last == "parent ends@8", "the last child sleeps 4 ms twice")
    }

    /// Four children that yield and sleep on the loop, traced with the
    /// virtual instant of each step.
    func taskGroupTrace() -> [String] {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let trace = Shared<[String]>([])
        Task(executorPreference: loop) { [self] in
            trace.withLock { $0.append("parent starts@\(ms(loop.now))") }
            await withTaskGroup(of: Void.self) { group in
                for child in 0..<4 {
                    group.addTask { [self] in
                        for step in 0..<3 {
                            trace.withLock { $0.append("child \(child) step \(step)@\(ms(loop.now))") }
                            if (child + step).isMultiple(of: 2) {
                                await Task.yield()
                            } else {
                                try? await loop.sleep(for: .milliseconds(Int64(child + 1)))
                            }
                        }
                    }
                }
            }
            trace.withLock { $0.append("parent ends@\(ms(loop.now))") }
        }
        // Not driven: nothing ran, on this thread or any other.
        #expect(trace.withLock { $0 }.isEmpty)
        loop.runUntilIdle()
        let atStart = trace.withLock { $0 }
        #expect(!atStart.contains { $0.hasPrefix("parent ends") }, "the children's sleeps ended without time passing")
        loop.advance(by: .seconds(1))
        return trace.withLock { $0 }
    }

    @Test func aSleepResumesAtExactlyItsVirtualDeadline() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let woke = Shared<[Int64]>([])
        Task(executorPreference: loop) { [self] in
            try? await loop.sleep(for: .seconds(5))
            woke.withLock { $0.append(ms(loop.now)) }
            let clock = loop.clock
            try? await clock.sleep(until: clock.now.advanced(by: .milliseconds(250)))
            woke.withLock { $0.append(ms(loop.now)) }
        }
        loop.runUntilIdle()
        #expect(loop.nextTimerDeadline == start + .seconds(5))
        loop.advance(to: start + .seconds(5) + .nanoseconds(-1))
        #expect(woke.withLock { $0 }.isEmpty)
        loop.advance(by: .nanoseconds(1))
        #expect(woke.withLock { $0 } == [5_000])
        loop.advance(by: .seconds(10))
        #expect(woke.withLock { $0 } == [5_000, 5_250])
    }

    @Test func cancellingASleepingTaskResumesItAndRemovesItsTimer() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let outcome = Shared<String?>(nil)
        let task = Task(executorPreference: loop) { [self] in
            do {
                try await loop.sleep(for: .seconds(30))
                outcome.withLock { $0 = "woke@\(ms(loop.now))" }
            } catch {
                outcome.withLock { $0 = "\(error is CancellationError ? "cancelled" : "failed")@\(ms(loop.now))" }
            }
        }
        loop.advance(by: .seconds(1))
        #expect(outcome.withLock { $0 } == nil)
        #expect(loop.nextTimerDeadline == start + .seconds(30))

        task.cancel()
        loop.runUntilIdle()
        #expect(outcome.withLock { $0 } == "cancelled@1000")
        #expect(loop.nextTimerDeadline == nil)
    }

    @Test func turnEndHooksRunOncePerTurnAfterItsWork() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        let log = Shared<[String]>([])
        let hook = loop.addTurnEndHook { log.withLock { $0.append("hook") } }
        #expect(loop.runUntilIdle() == 0)
        #expect(log.withLock { $0 }.isEmpty, "an idle loop runs no turn")

        loop.execute {
            log.withLock { $0.append("a") }
            loop.execute { log.withLock { $0.append("b") } }
        }
        #expect(loop.runUntilIdle() == 1)
        #expect(log.withLock { $0 } == ["a", "b", "hook"])

        // A timer's work runs in the next turn, which ends with the hook again.
        loop.schedule(after: .zero) {
            log.withLock { $0.append("timer") }
            loop.execute { log.withLock { $0.append("c") } }
        }
        #expect(loop.runUntilIdle() == 2)
        #expect(log.withLock { $0 } == ["a", "b", "hook", "timer", "hook", "c", "hook"])

        loop.removeTurnEndHook(hook)
        loop.execute { log.withLock { $0.append("d") } }
        #expect(loop.runUntilIdle() == 1)
        #expect(log.withLock { $0 }.last == "d")
    }

    @Test func theDrivingThreadIsTheLoopsAndAStoppedLoopRunsNothing() {
        let loop = EventLoop(virtualNamed: "test-virtual", startingAt: start)
        #expect(loop.isVirtual)
        #expect(loop.inLoop)
        let ran = Shared(0)
        loop.execute { ran.withLock { $0 += 1 } }
        loop.stop()
        #expect(loop.runUntilIdle() == 0)
        #expect(ran.withLock { $0 } == 0)
    }
}
