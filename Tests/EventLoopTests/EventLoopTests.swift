import EventLoop
import Glibc
import Synchronization
import Testing

/// Test state shared with closures that run on the loop.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R: Sendable>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}

/// An actor whose executor is a loop.
actor LoopCounter {
    let loop: EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    var value = 0
    init(loop: EventLoop) { self.loop = loop }
    func increment() -> Bool {
        value += 1
        return loop.inLoop
    }
}

/// The loop the daemon runs on: ordering, timers, descriptors, the
/// executor roles and load moderation. Each test makes a loop of its own.
@Suite struct EventLoopTests {
    /// Runs `body` on `loop` and returns its result.
    func on<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            loop.execute { continuation.resume(returning: body()) }
        }
    }

    @Test func workSubmittedFromOtherThreadsRunsOnTheLoopInOrder() async {
        let loop = EventLoop(name: "test-order")
        defer { loop.stop() }
        let seen = Shared<[Int]>([])
        let offLoop = Shared(0)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for i in 0..<1000 {
                    loop.execute {
                        if !loop.inLoop { offLoop.withLock { $0 += 1 } }
                        seen.withLock { $0.append(i) }
                    }
                }
            }
        }
        _ = await on(loop) { 0 }
        #expect(seen.withLock { $0 } == Array(0..<1000))
        #expect(offLoop.withLock { $0 } == 0)
        #expect(!loop.inLoop)
    }

    @Test func timersFireInDeadlineOrderNotEarlyAndCancelledOnesNever() async {
        let loop = EventLoop(name: "test-timers")
        defer { loop.stop() }
        let fired = Shared<[(Int, Duration)]>([])
        let start = MonotonicInstant.now
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                for (n, ms) in [(3, 60), (1, 20), (2, 40)] {
                    loop.schedule(after: .milliseconds(ms)) { fired.withLock { $0.append((n, start.duration(to: .now))) } }
                }
                let cancelled = loop.schedule(after: .milliseconds(30)) { fired.withLock { $0.append((99, .zero)) } }
                loop.cancelTimer(cancelled)
                loop.schedule(after: .milliseconds(100)) { done.resume() }
            }
        }
        let result = fired.withLock { $0 }
        #expect(result.map(\.0) == [1, 2, 3])
        for (n, at) in result {
            #expect(at >= .milliseconds(20 * n), "timer \(n) fired at \(at)")
        }
    }

    @Test func aWatchedDescriptorCallsItsHandlerUntilRemoved() async throws {
        let loop = EventLoop(name: "test-watch")
        defer { loop.stop() }
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let reads = Shared(0)
        let (readFD, writeFD) = (fds[0], fds[1])
        let id = await on(loop) {
            loop.watch(readFD, interest: .readable) { ready in
                var byte: UInt8 = 0
                if ready.contains(.readable), read(readFD, &byte, 1) == 1 { reads.withLock { $0 += 1 } }
            }
        }
        var byte: UInt8 = 7
        _ = write(writeFD, &byte, 1)
        #expect(await eventually { reads.withLock { $0 } == 1 })
        await on(loop) { loop.removeWatch(id) }
        _ = write(writeFD, &byte, 1)
        try await Task.sleep(for: .milliseconds(100))
        #expect(reads.withLock { $0 } == 1, "a removed watch was still called")
    }

    @Test func actorsAndPreferringTasksRunOnTheLoop() async {
        let loop = EventLoop(name: "test-executor")
        defer { loop.stop() }
        let counter = LoopCounter(loop: loop)
        let onLoop = await withTaskExecutorPreference(loop) {
            await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        let here = loop.inLoop
                        let there = await counter.increment()
                        return here && there
                    }
                }
                var all = true
                for await ok in group { all = all && ok }
                return all
            }
        }
        #expect(onLoop)
        #expect(await counter.value == 50)
    }

    /// A dense stream is taken in batches: after two busy turns close
    /// together, the loop waits out the moderation before reading again.
    /// Timers still fire on time meanwhile.
    @Test func moderationBatchesADenseStreamButNeverDelaysTimers() async throws {
        let loop = EventLoop(name: "test-moderation")
        loop.moderation = .milliseconds(50)
        defer { loop.stop() }
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let (readFD, writeFD) = (fds[0], fds[1])
        let turns = Shared<[Int]>([])
        _ = await on(loop) {
            loop.watch(readFD, interest: .readable) { _ in
                var buffer = [UInt8](repeating: 0, count: 4096)
                let n = read(readFD, &buffer, buffer.count)
                turns.withLock { $0.append(n) }
                loop.noteBusy()
            }
        }
        // 200 one-byte writes over ~200 ms: without moderation about one turn each.
        let timerLate = Shared<Duration?>(nil)
        let start = MonotonicInstant.now
        _ = await on(loop) {
            loop.schedule(after: .milliseconds(120)) { timerLate.withLock { $0 = start.duration(to: .now) - .milliseconds(120) } }
        }
        var byte: UInt8 = 1
        for _ in 0..<200 {
            _ = write(writeFD, &byte, 1)
            usleep(1000)
        }
        try await Task.sleep(for: .milliseconds(200))
        let batches = turns.withLock { $0 }
        #expect(batches.reduce(0, +) == 200)
        #expect(batches.count <= 20, "\(batches.count) turns for 200 writes in ~250 ms with 50 ms moderation")
        let late = try #require(timerLate.withLock { $0 })
        #expect(late < .milliseconds(20), "the timer fired \(late) late")
    }
}

/// Polls `condition` until it holds or `timeout` passes.
func eventually(timeout: Duration = .seconds(5), _ condition: @Sendable () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}
