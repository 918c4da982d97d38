import EventLoop
import Foundation
@_spi(FaultInjection) @testable import Readings
import Synchronization
import Testing

/// A recorder on a loop it was given (the deterministic simulation's
/// virtual one): its writes and fsyncs run only when the loop is driven,
/// and on the loop's clock.
@Suite("Readings recorder on a virtual loop")
struct ReadingRecorderVirtualLoopTests {
    @Test func theFsyncComesAtTheVirtualFlushDeadline() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let start = MonotonicInstant(nanoseconds: 7_000_000_000)
        let loop = EventLoop(virtualNamed: "test-disk", startingAt: start)
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let syncs = SyncTimes()
        log.syncCall = { fd, path in
            syncs.append(start.duration(to: loop.now))
            try LogFileSystem.sync(fd, path: path)
        }
        let errors = ErrorLog()
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(2), maxBacklog: 100, loop: loop, onError: errors.append)

        loop.advance(by: .seconds(1))
        recorder.write([testReading(0), testReading(1)])
        #expect(recorder.stats.written == 0, "written before the loop was driven")
        loop.runUntilIdle()
        #expect(recorder.stats.written == 2)
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == [0, 1])
        #expect(syncs.all.isEmpty)
        #expect(loop.nextTimerDeadline == start + .seconds(3))

        loop.advance(to: start + .seconds(3) + .nanoseconds(-1))
        #expect(syncs.all.isEmpty, "synced before the flush interval passed")
        loop.advance(to: start + .seconds(3))
        #expect(syncs.all == [.seconds(3)])

        // An idle recorder sets no timer.
        #expect(loop.nextTimerDeadline == nil)
        // close() on the loop's thread runs at once, with a last fsync.
        recorder.close()
        #expect(syncs.all == [.seconds(3), .seconds(3)])
        #expect(errors.messages.isEmpty)
    }
}

/// When each fsync ran, on the loop's clock since the test's start.
final class SyncTimes: Sendable {
    private let times = Mutex<[Duration]>([])

    func append(_ time: Duration) { times.withLock { $0.append(time) } }
    var all: [Duration] { times.withLock { $0 } }
}
