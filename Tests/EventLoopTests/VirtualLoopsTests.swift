import DurationUnits
import EventLoop
import Testing

/// Several virtual loops on one clock (`VirtualLoops`): the deterministic
/// simulation's processes.
@Suite struct VirtualLoopsTests {
    let start = MonotonicInstant(nanoseconds: 1_000_000_000)

    func ms(_ instant: MonotonicInstant) -> Int64 {
        start.duration(to: instant).wholeMilliseconds
    }

    @Test func workHandedToAnotherLoopRunsAtTheInstantItWasHandedOver() {
        let loops = VirtualLoops(start: start)
        let a = loops.makeLoop(named: "a")
        let b = loops.makeLoop(named: "b")
        let seen = Shared<[String]>([])
        // b's timer is the later one; a's hands b work at 20 ms, which must
        // run at 20 ms, not when b's own clock would next be moved.
        b.schedule(after: .milliseconds(50)) { [self] in seen.withLock { $0.append("b timer@\(ms(b.now))") } }
        a.schedule(after: .milliseconds(20)) { [self] in
            seen.withLock { $0.append("a timer@\(ms(a.now))") }
            b.execute { [self] in
                seen.withLock { $0.append("b got it@\(ms(b.now))") }
                a.execute { [self] in seen.withLock { $0.append("a got the answer@\(ms(a.now))") } }
            }
        }
        #expect(loops.nextDeadline == start + .milliseconds(20))
        loops.advance(to: start + .seconds(1))
        #expect(seen.withLock { $0 } == ["a timer@20", "b got it@20", "a got the answer@20", "b timer@50"])
        #expect(a.now == start + .seconds(1) && b.now == a.now)
    }

    @Test func aFrozenLoopRunsNothingUntilItThawsAndItsTimersFireLate() {
        let loops = VirtualLoops(start: start)
        let daemon = loops.makeLoop(named: "daemon")
        let hung = loops.makeLoop(named: "hung")
        let seen = Shared<[String]>([])
        hung.schedule(after: .milliseconds(100)) { [self] in seen.withLock { $0.append("hung timer@\(ms(hung.now))") } }
        loops.freeze(hung, until: start + .seconds(2))
        daemon.schedule(after: .milliseconds(500)) { [self] in
            hung.execute { [self] in seen.withLock { $0.append("call served@\(ms(hung.now))") } }
        }
        #expect(loops.isFrozen(hung))
        // The thaw is the next deadline after the daemon's timer: the hung
        // loop's own 100 ms timer does not count while it is frozen.
        loops.advance(to: start + .seconds(1))
        #expect(seen.withLock { $0 }.isEmpty)
        #expect(loops.nextDeadline == start + .seconds(2))
        loops.advance(to: start + .seconds(3))
        #expect(seen.withLock { $0 } == ["call served@2000", "hung timer@2000"])
        #expect(!loops.isFrozen(hung))
    }

    @Test func aRemovedLoopNeverRunsAgain() {
        let loops = VirtualLoops(start: start)
        let killed = loops.makeLoop(named: "killed")
        let ran = Shared(false)
        killed.schedule(after: .milliseconds(10)) { ran.withLock { $0 = true } }
        loops.remove(killed)
        killed.execute { ran.withLock { $0 = true } }
        #expect(loops.nextDeadline == nil)
        loops.advance(to: start + .seconds(1))
        #expect(!ran.withLock { $0 })
        #expect(!loops.step(notAfter: start + .seconds(10)))
    }

    @Test func stepRunsOneInstantAtATime() {
        let loops = VirtualLoops(start: start)
        let loop = loops.makeLoop(named: "one")
        let seen = Shared<[Int64]>([])
        for delay in [30, 10, 20] {
            loop.schedule(after: .milliseconds(delay)) { [self] in seen.withLock { $0.append(ms(loop.now)) } }
        }
        #expect(loops.step(notAfter: start + .seconds(1)))
        #expect(seen.withLock { $0 } == [10])
        #expect(loops.step(notAfter: start + .milliseconds(20)))
        #expect(!loops.step(notAfter: start + .milliseconds(25)), "the next is past the limit")
        #expect(seen.withLock { $0 } == [10, 20])
    }
}
