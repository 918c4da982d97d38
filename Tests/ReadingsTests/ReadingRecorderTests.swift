import Foundation
@_spi(FaultInjection) @testable import Readings
import Testing

#if canImport(Glibc)
import Glibc
import Synchronization
#endif

/// Simulates a disk that refuses writes (ENOSPC) while `failing` is set.
final class FailingDisk: @unchecked Sendable {
    private let lock = NSLock()
    private var isFailing = false

    var failing: Bool {
        get { lock.withLock { isFailing } }
        set { lock.withLock { isFailing = newValue } }
    }

    func install(on log: ReadingLog) {
        log.writeCall = { [self] fd, bytes in
            if failing { return -Int(ENOSPC) }
            return LogFileSystem.systemWrite(fd, bytes)
        }
    }
}

/// A disk whose next write does not return until released: a frozen file
/// system, an SD card stalled in its own garbage collection.
final class HangingDisk: @unchecked Sendable {
    private let lock = NSLock()
    private var hangNext = false
    private var wasReleased = false
    private let entered = DispatchSemaphore(value: 0)
    private let release = DispatchSemaphore(value: 0)

    /// The next write hangs until `releaseWrite()`.
    func hangNextWrite() { lock.withLock { hangNext = true } }

    /// Waits until a write is hanging.
    func waitUntilHanging() -> Bool { entered.wait(timeout: .now() + 10) == .success }

    func releaseWrite() {
        lock.withLock { wasReleased = true }
        release.signal()
    }

    var released: Bool { lock.withLock { wasReleased } }

    func install(on log: ReadingLog) {
        log.writeCall = { [self] fd, bytes in
            if lock.withLock({ () -> Bool in defer { hangNext = false }; return hangNext }) {
                entered.signal()
                release.wait()
            }
            return LogFileSystem.systemWrite(fd, bytes)
        }
    }
}

/// Collects `onStall` reports.
final class StallLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [ReadingRecorder.DiskStall] = []

    func append(_ report: ReadingRecorder.DiskStall) { lock.withLock { stored.append(report) } }
    var reports: [ReadingRecorder.DiskStall] { lock.withLock { stored } }
}

/// Collects `onError` messages.
final class ErrorLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []

    func append(_ message: String) { lock.withLock { stored.append(message) } }
    var messages: [String] { lock.withLock { stored } }
}

/// Polls `condition` until it holds or `timeout` passes.
func eventually(timeout: Duration = .seconds(5), _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return try condition()
}

@Suite("Readings recorder")
struct ReadingRecorderTests {
    @Test func concurrentReadingsAreWrittenInOrderWithEverySeqOnce() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 64 << 10, retainSize: 1 << 30)
        let errors = ErrorLog()
        let recorder = ReadingRecorder(log: log, flushInterval: .milliseconds(5), maxBacklog: 100_000, onError: errors.append)
        let threads = 4, perThread = 500
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                recorder.record(testReading(thread << 12 | index))
            }
        }
        recorder.flush()

        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...UInt64(threads * perThread)))
        for thread in 0..<threads {
            // Each thread's readings keep the order in which it recorded them.
            let mine = records.compactMap(readingNumber).filter { $0 >> 12 == thread }.map { $0 & 0xfff }
            #expect(mine == Array(0..<perThread))
        }
        #expect(recorder.stats == ReadingRecorder.Stats(written: UInt64(threads * perThread), lastSeq: UInt64(threads * perThread)))
        #expect(errors.messages.isEmpty)
        recorder.close()
    }

    @Test func aFileRemovedUnderTheRecorderIsToldOnceAndKeepsEveryReading() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let errors = ErrorLog(), restored = ErrorLog()
        let recorder = ReadingRecorder(
            log: log, flushInterval: .seconds(60), maxBacklog: 100, onRestored: restored.append, onError: errors.append)
        for number in 0..<3 { recorder.record(testReading(number)) }
        recorder.flush()
        let name = try #require(try dir.logFiles().first)
        try FileManager.default.removeItem(atPath: dir.path + "/" + name)
        for number in 3..<5 { recorder.record(testReading(number)) }
        recorder.flush()
        for number in 5..<6 { recorder.record(testReading(number)) }
        recorder.close()
        #expect(restored.messages == [dir.path + "/" + name])
        #expect(errors.messages.isEmpty)
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == Array(0..<6))
    }

    @Test func readingsReachWriteWithoutWaitingForAFlush() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let firstWrite = WriteClock()
        log.writeCall = { fd, bytes in
            firstWrite.mark()
            return LogFileSystem.systemWrite(fd, bytes)
        }
        // A flush interval far beyond the bound below: the write must not wait for it.
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(60), maxBacklog: 10, onError: { _ in })
        let start = ContinuousClock.now
        recorder.record(testReading(1))
        #expect(await eventually { firstWrite.instant != nil })
        let elapsed = try #require(firstWrite.instant) - start
        // Typically well under a millisecond; the bound is loose for loaded test machines.
        #expect(elapsed < .seconds(2))
        #expect(try ReadingLog.readRecords(directory: dir.path).count == 1)
        #expect(recorder.stats.written == 1)
        recorder.close()
    }

    /// The daemon's event loop hands in each turn's readings and polls the
    /// dongle: a write that hangs must hold neither, or the dongle falls
    /// asleep. (Before, the turn's write(2) ran on the caller's thread.)
    @Test func aHungDiskNeverHoldsTheCallerAndIsShownUntilItAnswers() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let disk = HangingDisk()
        disk.install(on: log)
        let stalls = StallLog(), errors = ErrorLog()
        let recorder = ReadingRecorder(
            log: log, flushInterval: .seconds(60), maxBacklog: 1000, retryInterval: .seconds(3600),
            stallLimit: .milliseconds(200), onStall: stalls.append, onError: errors.append)
        disk.hangNextWrite()
        // Released from elsewhere after 3 s, so that a recorder that writes on
        // the caller's thread fails this test instead of hanging it.
        let releaser = Thread { Thread.sleep(forTimeInterval: 3); if !disk.released { disk.releaseWrite() } }
        releaser.start()
        recorder.write([testReading(0)])
        #expect(disk.waitUntilHanging(), "the first write never reached the disk")
        for number in 1...100 { recorder.write([testReading(number)]) }
        #expect(!disk.released, "handing in readings waited for the hung write")
        #expect(recorder.stats.pending == 101)
        #expect(recorder.stats.lastError == nil, "not stalled yet: 200 ms have not passed")

        // Past the limit: shown by the stats, and told once by the next turn.
        #expect(await eventually { recorder.stats.lastError != nil })
        let shown = try #require(recorder.stats.lastError)
        #expect(shown.hasPrefix("the disk has not answered a write in \(dir.path) for "), "\(shown)")
        recorder.write([testReading(101)])
        recorder.write([testReading(102)])
        let told = stalls.reports
        #expect(told.count == 1, "\(told)")
        if case .stalled(let message)? = told.first {
            #expect(message.contains("readings wait in memory (at most 1000"), "\(message)")
        } else {
            Issue.record("not told as stalled: \(told)")
        }

        // The disk answers: everything is written in order, and that is told.
        if !disk.released { disk.releaseWrite() }
        #expect(await eventually { recorder.stats.written == 103 })
        #expect(recorder.stats.lastError == nil && recorder.stats.pending == 0)
        #expect(stalls.reports.count == 2)
        if case .answered(let message)? = stalls.reports.last {
            #expect(message.hasPrefix("the disk answered again after "), "\(message)")
        } else {
            Issue.record("the answer not told: \(stalls.reports)")
        }
        #expect(errors.messages.isEmpty, "\(errors.messages)")
        recorder.close()
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...103))
        #expect(records.compactMap(readingNumber) == Array(0...102))
    }

    @Test func failingDiskKeepsBacklogThenWritesGapAndBacklogInOrder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let disk = FailingDisk()
        disk.install(on: log)
        let errors = ErrorLog()
        // A long retry interval, so only our flush() calls write: the test is deterministic.
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(1), maxBacklog: 10, retryInterval: .seconds(3600), onError: errors.append)

        recorder.record(testReading(0))
        recorder.flush()
        #expect(recorder.stats.written == 1)

        disk.failing = true
        for number in 1...25 { recorder.record(testReading(number, at: testDate.addingTimeInterval(Double(number)))) }
        recorder.flush()
        recorder.flush()
        var stats = recorder.stats
        #expect(stats.pending == 10)
        #expect(stats.dropped == 15)
        #expect(stats.written == 1)
        #expect(stats.lastSeq == 1)
        #expect(stats.lastError?.contains("No space left on device") == true)
        // Reported once, however often it failed.
        #expect(errors.messages.count == 1)
        #expect(errors.messages.first?.contains("No space left on device") == true)
        #expect(try ReadingLog.readRecords(directory: dir.path).count == 1)

        disk.failing = false
        recorder.flush()
        stats = recorder.stats
        #expect(stats == ReadingRecorder.Stats(written: 11, lastSeq: 12, pending: 0, dropped: 15, gapRecords: 1, lastError: nil))

        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...12))
        #expect(readingNumber(records[0]) == 0)
        // The gap stands where the 15 oldest waiting readings would have been, dated
        // like the newest of them.
        #expect(records[1].source == "gap")
        #expect(records[1].count == 15)
        #expect(records[1].device == testDevice)
        #expect(records[1].ts == UTCTimestamp.string(testDate.addingTimeInterval(15)))
        #expect(records[2...].compactMap(readingNumber) == Array(16...25))
        recorder.close()
    }

    @Test func retriesOnItsOwnUntilTheDiskWorksAgain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let disk = FailingDisk()
        disk.install(on: log)
        disk.failing = true
        let errors = ErrorLog()
        let recorder = ReadingRecorder(log: log, flushInterval: .milliseconds(10), maxBacklog: 100, retryInterval: .milliseconds(10), onError: errors.append)

        for number in 0..<5 { recorder.record(testReading(number)) }
        #expect(await eventually { recorder.stats.lastError != nil })
        #expect(recorder.stats.pending == 5)
        // More readings while waiting for the retry: they join the backlog.
        for number in 5..<8 { recorder.record(testReading(number)) }
        disk.failing = false

        #expect(await eventually { recorder.stats.written == 8 })
        #expect(recorder.stats.pending == 0)
        #expect(recorder.stats.lastError == nil)
        // And new readings flow normally again, without a flush.
        recorder.record(testReading(8))
        #expect(await eventually { recorder.stats.written == 9 })
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...9))
        #expect(records.compactMap(readingNumber) == Array(0..<9))
        #expect(errors.messages.count == 1)
        recorder.close()
    }

    /// While the disk stays full, a retry formats and tries a few readings,
    /// not the whole chunk again; once they are taken the rest follows at once.
    @Test func aRetryAfterAFailureTriesAFewReadingsFirst() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let disk = FailingDisk()
        let attempts = Mutex<[Int]>([])
        log.writeCall = { fd, bytes in
            attempts.withLock { $0.append(bytes.count { $0 == UInt8(ascii: "\n") }) }
            if disk.failing { return -Int(ENOSPC) }
            return LogFileSystem.systemWrite(fd, bytes)
        }
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(1), maxBacklog: 1000, retryInterval: .seconds(3600)) { _ in }
        disk.failing = true
        for number in 0..<100 { recorder.record(testReading(number)) }
        recorder.flush()
        recorder.flush()
        recorder.flush()
        // (a drain the readings scheduled may add a retry of its own)
        let failed = attempts.withLock { $0 }
        #expect(failed.count >= 3)
        #expect(failed.dropFirst().allSatisfy { $0 == ReadingRecorder.probeSize })
        #expect(recorder.stats.pending == 100)
        disk.failing = false
        recorder.flush()
        #expect(attempts.withLock { Array($0.dropFirst(failed.count)) } == [ReadingRecorder.probeSize, 100 - ReadingRecorder.probeSize])
        #expect(recorder.stats.written == 100)
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == Array(0..<100))
        recorder.close()
    }

    @Test func closeFlushesAndLaterReadingsAreIgnored() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(60), maxBacklog: 100, onError: { _ in })
        for number in 0..<3 { recorder.record(testReading(number)) }
        recorder.close()
        recorder.record(testReading(3))
        recorder.flush()
        recorder.close()
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == [0, 1, 2])
        #expect(recorder.stats.written == 3)
        #expect(recorder.stats.pending == 0)
    }

    @Test func flushFromTheErrorHandlerDoesNotDeadlock() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let disk = FailingDisk()
        disk.install(on: log)
        disk.failing = true
        let box = RecorderBox()
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(1), maxBacklog: 10, retryInterval: .seconds(3600)) { _ in
            box.recorder?.flush()  // runs on the recorder's queue
        }
        box.recorder = recorder
        recorder.record(testReading(0))
        recorder.flush()
        #expect(recorder.stats.pending == 1)
        box.recorder = nil
        disk.failing = false
        recorder.close()
        #expect(try ReadingLog.readRecords(directory: dir.path).count == 1)
    }
}

/// Remembers when write(2) was first called.
final class WriteClock: @unchecked Sendable {
    private let lock = NSLock()
    private var first: ContinuousClock.Instant?

    func mark() { lock.withLock { if first == nil { first = .now } } }
    var instant: ContinuousClock.Instant? { lock.withLock { first } }
}

final class RecorderBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: ReadingRecorder?
    var recorder: ReadingRecorder? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }

    @Test func aBigBacklogGoesOutInChunksADiskWithLittleRoomCanTake() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 64 << 20, retainSize: 1 << 30)
        // A disk that refuses any single write over 1 MiB, and everything while `failing`
        // (the whole backlog is about 1.7 MB; one chunk about 0.6 MB).
        let disk = FailingDisk()
        log.writeCall = { fd, bytes in
            if disk.failing || bytes.count > 1 << 20 { return -Int(ENOSPC) }
            return LogFileSystem.systemWrite(fd, bytes)
        }
        let recorder = ReadingRecorder(log: log, flushInterval: .seconds(1), maxBacklog: 50_000, retryInterval: .seconds(3600)) { _ in }
        disk.failing = true
        let count = 3 * ReadingRecorder.chunkSize + 7
        for number in 0..<count { recorder.record(testReading(number)) }
        recorder.flush()
        #expect(recorder.stats.pending == count)
        disk.failing = false
        recorder.flush()
        #expect(recorder.stats.pending == 0)
        #expect(recorder.stats.written == UInt64(count))
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...UInt64(count)))
        recorder.close()
    }
}
