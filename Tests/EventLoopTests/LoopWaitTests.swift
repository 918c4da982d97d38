import EventLoop
import Synchronization
import Testing

/// `LoopWait`, under `EventLoop.sleep` and `TerminationSignal.wait`: one
/// resumption, and the event's source removed on the loop however the wait ends.
@Suite struct LoopWaitTests {
    /// What happened to one wait's arming, as seen on the loop.
    final class Trace: Sendable {
        let armed = Mutex(0)
        let disarmed = Mutex(0)
        let disarmedOnLoop = Mutex(true)

        func disarm(_ loop: EventLoop) -> LoopWait<Int>.Disarm {
            { [self] in
                disarmed.withLock { $0 += 1 }
                if !loop.inLoop { disarmedOnLoop.withLock { $0 = false } }
            }
        }

        /// The disarm runs on the loop after the waiter resumes: wait for the loop's turn.
        func settled(_ loop: EventLoop) async {
            await withCheckedContinuation { continuation in loop.execute { continuation.resume() } }
        }
    }

    @Test func theEventsValueEndsTheWaitAndItsSourceIsRemovedOnce() async {
        let loop = EventLoop(name: "test-wait")
        defer { loop.stop() }
        let trace = Trace()
        let value = await LoopWait<Int>(on: loop).value { wait in
            trace.armed.withLock { $0 += 1 }
            loop.schedule(after: .milliseconds(10)) {
                wait.resume(7)
                wait.resume(8)  // a second event is ignored
            }
            return trace.disarm(loop)
        }
        await trace.settled(loop)
        #expect(value == 7)
        #expect(trace.armed.withLock { $0 } == 1)
        #expect(trace.disarmed.withLock { $0 } == 1)
        #expect(trace.disarmedOnLoop.withLock { $0 })
    }

    @Test func anEventThatComesWhileArmingStillEndsTheWaitAndDisarms() async {
        let loop = EventLoop(name: "test-wait")
        defer { loop.stop() }
        let trace = Trace()
        let value = await LoopWait<Int>(on: loop).value { wait in
            trace.armed.withLock { $0 += 1 }
            wait.resume(3)
            return trace.disarm(loop)
        }
        await trace.settled(loop)
        #expect(value == 3)
        #expect(trace.disarmed.withLock { $0 } == 1)
    }

    @Test func cancellingAParkedWaitReturnsNilAndDisarms() async throws {
        let loop = EventLoop(name: "test-wait")
        defer { loop.stop() }
        let trace = Trace()
        let armed = Mutex(false)
        let task = Task { () async -> Int? in
            await LoopWait<Int>(on: loop).value { wait in
                trace.armed.withLock { $0 += 1 }
                armed.withLock { $0 = true }
                return trace.disarm(loop)  // never resumed by an event
            }
        }
        while !armed.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        task.cancel()
        #expect(await task.value == nil)
        await trace.settled(loop)
        #expect(trace.disarmed.withLock { $0 } == 1)
        #expect(trace.disarmedOnLoop.withLock { $0 })
    }

    @Test func aTaskCancelledBeforeItWaitsArmsNothing() async {
        let loop = EventLoop(name: "test-wait")
        defer { loop.stop() }
        let trace = Trace()
        let task = Task { () async -> Int? in
            withUnsafeCurrentTask { $0?.cancel() }
            return await LoopWait<Int>(on: loop).value { _ in
                trace.armed.withLock { $0 += 1 }
                return trace.disarm(loop)
            }
        }
        #expect(await task.value == nil)
        await trace.settled(loop)
        #expect(trace.armed.withLock { $0 } == 0)
        #expect(trace.disarmed.withLock { $0 } == 0)
    }
}
