import EventLoop
import Foundation
import Synchronization
import Testing

/// The loop as a place to sleep and to wait on: what keeps the daemon off
/// libdispatch's worker pool.
@Suite struct EventLoopSleepTests {
    @Test func aSleepEndsOnTheLoopAfterItsDuration() async throws {
        let loop = EventLoop(name: "test-sleep")
        defer { loop.stop() }
        let started = ContinuousClock.now
        let onLoop = try await withTaskExecutorPreference(loop) { () async throws -> Bool in
            try await loop.sleep(for: .milliseconds(50))
            return loop.inLoop
        }
        #expect(ContinuousClock.now - started >= .milliseconds(50))
        #expect(onLoop, "the task resumed off the loop it prefers")
    }

    @Test func cancellingASleepEndsItAtOnceWithCancellationError() async throws {
        let loop = EventLoop(name: "test-sleep")
        defer { loop.stop() }
        let started = ContinuousClock.now
        let task = Task(executorPreference: loop) { () async -> Bool in
            do {
                try await loop.sleep(for: .seconds(30))
                return false
            } catch {
                return error is CancellationError
            }
        }
        try await Task.sleep(for: .milliseconds(20))
        task.cancel()
        #expect(await task.value, "the sleep did not throw CancellationError")
        #expect(ContinuousClock.now - started < .seconds(5), "the cancelled sleep waited for its deadline")
    }

    @Test func aTaskCancelledBeforeItSleepsDoesNotSleep() async throws {
        let loop = EventLoop(name: "test-sleep")
        defer { loop.stop() }
        let task = Task(executorPreference: loop) { () async -> Bool in
            withUnsafeCurrentTask { $0?.cancel() }
            do {
                try await loop.sleep(for: .seconds(30))
                return false
            } catch {
                return error is CancellationError
            }
        }
        #expect(await task.value)
    }

    @Test func theLoopClockSleepsOnTheLoop() async throws {
        let loop = EventLoop(name: "test-clock")
        defer { loop.stop() }
        let clock = loop.clock
        let deadline = clock.now.advanced(by: .milliseconds(30))
        try await clock.sleep(until: deadline)
        #expect(clock.now >= deadline)
    }

    @Test func executeAndWaitReturnsAfterTheBodyRanOnTheLoop() {
        let loop = EventLoop(name: "test-wait")
        defer { loop.stop() }
        let ran = Mutex<(Bool, Bool)>((false, false))
        loop.executeAndWait { ran.withLock { $0 = (true, loop.inLoop) } }
        let (didRun, onLoop) = ran.withLock { $0 }
        #expect(didRun && onLoop)
    }

    @Test func theRootTaskRunsOnItsOwnLoopAndHandsBackItsResult() {
        let result = EventLoop.runRootTask(name: "test-root") { () async -> String? in
            // Not on the global executor: the thread of the loop, named after it.
            (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(result == "test-root")
    }
}
