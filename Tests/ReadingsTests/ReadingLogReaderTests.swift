import Foundation
@_spi(FaultInjection) @testable import Readings
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a reader's sink received: all bytes, and every batch (to check that only whole lines arrive).
private final class Received: Sendable {
    private let state = Mutex<(bytes: [UInt8], batches: Int, partialBatches: Int)>(([], 0, 0))

    func add(_ batch: UnsafeRawBufferPointer) {
        state.withLock {
            $0.bytes.append(contentsOf: batch)
            $0.batches += 1
            if batch.last != UInt8(ascii: "\n") { $0.partialBatches += 1 }
        }
    }

    var lines: [String] {
        state.withLock { String(decoding: $0.bytes, as: UTF8.self) }.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var batches: Int { state.withLock { $0.batches } }
    var partialBatches: Int { state.withLock { $0.partialBatches } }

    /// The records received, decoded as `tether readings | jq` would.
    func records() -> [ReadingRecord?] {
        let decoder = JSONDecoder()
        return lines.map { ReadingRecord.decode(line: Array($0.utf8), using: decoder) }
    }

    func seqs() -> [UInt64] { records().map { $0?.seq ?? 0 } }
}

/// Waits (polling briefly) until `condition` holds; false after `timeout`.
private func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while !condition() {
        if clock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// Runs a follower on a thread of its own, as `tether readings --follow` does on its main thread.
private final class FollowerRun: Sendable {
    let follower: ReadingLogFollower
    let received = Received()
    private let outcome = Mutex<Result<Void, any Error>?>(nil)

    init(directory: String, since: Date? = nil) throws {
        follower = try ReadingLogFollower(directory: directory, since: since)
        let thread = Thread { [self] in
            let result = Result { try follower.run { received.add($0) } }
            outcome.withLock { $0 = result }
        }
        thread.start()
    }

    var finished: Result<Void, any Error>? { outcome.withLock { $0 } }

    /// Stops the follower and waits for `run` to return; false if it did not.
    func stop() async -> Bool {
        follower.stop()
        return await eventually { finished != nil }
    }
}

private func readAll(_ directory: String, since: Date? = nil) throws -> Received {
    let received = Received()
    let reader = try ReadingLogReader(directory: directory, since: since)
    try reader.readAvailable { received.add($0) }
    return received
}

/// The bytes of every log file in the directory, oldest first.
private func logBytes(_ dir: TemporaryDirectory) throws -> [UInt8] {
    try dir.logFiles().flatMap { try dir.contents(of: $0) }
}

@Suite("Reading log reader (tether readings)")
struct ReadingLogReaderTests {
    @Test func printsEveryRecordInOrderAcrossRotatedFilesUnchanged() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 1 << 30)
        for batch in 0..<10 {
            try log.append((0..<5).map { testReading(batch * 5 + $0) })
            if batch == 4 { try log.appendGap(count: 7, device: testDevice, at: testDate) }
        }
        log.close()
        #expect(try dir.logFiles().count >= 5)

        let received = try readAll(dir.path)
        #expect(received.bytes == (try logBytes(dir)))
        #expect(received.seqs() == Array(1...51))
        let records = received.records()
        #expect(records.allSatisfy { $0 != nil })
        #expect(records.filter { $0?.source == "gap" }.map { $0?.count } == [7])
        #expect(records.compactMap { $0.flatMap(readingNumber) } == Array(0..<50))
        #expect(received.partialBatches == 0)
    }

    /// A forwarder's cursor: records after it, in order, and the files that
    /// end before it are not even opened (the first of them is deleted here).
    @Test func afterSeqStartsJustAfterACursor() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 1 << 30)
        for batch in 0..<10 { try log.append((0..<5).map { testReading(batch * 5 + $0) }) }
        log.close()
        let files = try dir.logFiles()
        #expect(files.count >= 5)
        try FileManager.default.removeItem(atPath: dir.path + "/" + files[0])
        let received = Received()
        let reader = try ReadingLogReader(directory: dir.path, afterSeq: 37)
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == Array(38...50))
    }

    /// The forwarder syncs what it read before storing its cursor (found by
    /// `make e2e`'s power-cut: a cursor stored for records the daemon had
    /// not fsynced yet was past the log's end after the cut). The file being
    /// read is fsynced every time, the directory once per file (a rotation's
    /// new name); nothing before the first read.
    @Test func syncReadFsyncsTheFileReadAndOncePerFileTheDirectory() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 1 << 30)
        let reader = try ReadingLogReader(directory: dir.path)
        let synced = Mutex<[String]>([])
        reader.syncCall = { fd, path in
            #expect(fsync(fd) == 0)
            synced.withLock { $0.append(path) }
        }
        try reader.syncRead()
        #expect(synced.withLock { $0 }.isEmpty)

        try log.append([testReading(0)])
        try reader.readAvailable { _ in }
        try reader.syncRead()
        try log.append([testReading(1)])
        try reader.readAvailable { _ in }
        try reader.syncRead()
        let first = try dir.logFiles()
        #expect(first.count == 1)
        let file = dir.path + "/" + first[0]
        #expect(synced.withLock { $0 } == [file, dir.path, file])

        // Rotation: the reader moves to the new file, whose name is synced once.
        synced.withLock { $0.removeAll() }
        for batch in 0..<5 { try log.append((0..<5).map { testReading(10 + batch * 5 + $0) }) }
        log.close()
        try reader.readAvailable { _ in }
        try reader.syncRead()
        try reader.syncRead()
        let newest = dir.path + "/" + (try dir.logFiles()).last!
        #expect(newest != file)
        #expect(synced.withLock { $0 } == [newest, dir.path, newest])
    }

    @Test func readsBigFilesInChunksOfWholeLines() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 30, retainSize: 1 << 30)
        try log.append((0..<3000).map { testReading($0) })  // ~450 KB in one file
        log.close()

        let received = try readAll(dir.path)
        #expect(received.bytes == (try logBytes(dir)))
        #expect(received.batches >= 5)  // 64 KiB at a time, not the whole file at once
        #expect(received.partialBatches == 0)
        #expect(received.seqs() == Array(1...3000))
    }

    @Test func sinceKeepsExactlyTheRecordsAtOrAfterTheCutoff() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 1 << 30)
        let start = testDate
        for second in 0..<40 {
            try log.append([testReading(second, at: start + TimeInterval(second))])
        }
        try log.appendGap(count: 3, device: testDevice, at: start + 40)
        log.close()
        #expect(try dir.logFiles().count >= 5)

        // A cutoff on a record's exact millisecond keeps that record.
        let atRecord = try readAll(dir.path, since: start + 17)
        #expect(atRecord.records().compactMap { $0.flatMap(readingNumber) } == Array(17..<40))
        #expect(atRecord.records().last??.source == "gap")
        // Between records: the next one is the first kept.
        let between = try readAll(dir.path, since: start + 17.5)
        #expect(between.records().compactMap { $0.flatMap(readingNumber) } == Array(18..<40))
        // Before everything / after everything.
        #expect(try readAll(dir.path, since: start - 3600).seqs() == Array(1...41))
        #expect(try readAll(dir.path, since: start + 3600).bytes.isEmpty)
    }

    @Test func sinceSkipsAFileWhoseSuccessorStartsBeforeTheCutoff() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let start = testDate
        // Each file holds three records. The first file ends with a record stamped far
        // ahead (a clock that jumped and was corrected): since the second file starts
        // before the cutoff, the first is skipped unread, that record included.
        var line: [UInt8] = []
        RecordFormat.appendReading(testReading(0), seq: 1, to: &line)
        let log = try ReadingLog(directory: dir.path, rotateSize: Int64(3 * line.count), retainSize: 1 << 30)
        let stamps: [TimeInterval] = [0, 1, 500, 2, 3, 4, 100, 101, 102]
        for (number, offset) in stamps.enumerated() {
            try log.append([testReading(number, at: start + offset)])
        }
        log.close()
        #expect(try dir.logFiles().count == 3)

        let received = try readAll(dir.path, since: start + 50)
        #expect(received.records().compactMap { $0.flatMap(readingNumber) } == [6, 7, 8])
        // Without the skip, a scan of every file would also print reading 2.
        let everything = try readAll(dir.path, since: start - 1)
        #expect(everything.seqs() == Array(1...9))
    }

    @Test func tornLastLineIsNotPrintedUntilItIsWhole() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((0..<3).map { testReading($0) })
        log.close()
        let name = try #require(try dir.logFiles().last)
        let complete = try dir.contents(of: name)
        let next = Array(#"{"ts":"2026-11-21T13:45:13.000Z","seq":4,"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":1}"#.utf8)
        try dir.append(Array(next.prefix(40)), to: name)

        let received = Received()
        let reader = try ReadingLogReader(directory: dir.path)
        try reader.readAvailable { received.add($0) }
        #expect(received.bytes == complete)
        #expect(received.seqs() == [1, 2, 3])

        // Nothing new until the line is finished; then exactly that line.
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3])
        try dir.append(Array(next.dropFirst(40)), to: name)
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3])
        try dir.append([UInt8(ascii: "\n")], to: name)
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3, 4])
        #expect(received.lines.last == String(decoding: next, as: UTF8.self))
        #expect(received.partialBatches == 0)
    }

    @Test func linesThatAreNotRecordsAreSkipped() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append([testReading(1)])
        log.close()
        let name = try #require(try dir.logFiles().last)
        // NULs where a crash left a hole, a fragment, an empty line, an overlong line.
        try dir.append([0, 0, 0, 0, UInt8(ascii: "\n")] + Array("seq\":3}\n\n".utf8), to: name)
        try dir.append([UInt8](repeating: UInt8(ascii: "x"), count: 200_000) + [UInt8(ascii: "\n")], to: name)
        var second: [UInt8] = []
        RecordFormat.appendReading(testReading(2), seq: 2, to: &second)
        try dir.append(second, to: name)

        let received = try readAll(dir.path)
        #expect(received.records().map { $0.flatMap(readingNumber) } == [1, 2])
    }

    @Test func aRepeatedWriteIsNotPrintedTwice() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((0..<3).map { testReading($0) })
        log.close()
        let name = try #require(try dir.logFiles().last)
        let bytes = try dir.contents(of: name)
        let received = Received()
        let reader = try ReadingLogReader(directory: dir.path)
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3])

        // The daemon rolled back the last record and wrote it again, followed by a new one.
        let lines = bytes.split(separator: UInt8(ascii: "\n")).map { Array($0) + [UInt8(ascii: "\n")] }
        let fourth = Array(String(decoding: lines[2], as: UTF8.self).replacingOccurrences(of: #""seq":3,"#, with: #""seq":4,"#).utf8)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.path + "/" + name))
        try handle.truncate(atOffset: UInt64(lines[0].count + lines[1].count))
        try handle.close()
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3])
        try dir.append(lines[2] + fourth, to: name)
        try reader.readAvailable { received.add($0) }
        #expect(received.seqs() == [1, 2, 3, 4])
    }

    @Test func aMissingDirectoryIsAnError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let missing = dir.path + "/nope"
        #expect(throws: ReadingLogError(operation: "opendir", path: missing, code: ENOENT)) {
            try ReadingLogReader(directory: missing)
        }
        #expect(throws: ReadingLogError(operation: "inotify_add_watch", path: missing, code: ENOENT)) {
            try ReadingLogFollower(directory: missing)
        }
    }

    @Test func followPrintsNewRecordsAcrossRotationWithoutLossOrDuplicates() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Small files and a small budget: rotation and retention happen while following.
        // (A batch stays below the budget, and the test lets the follower catch up after
        // each: retention must not delete files the follower has not reached.)
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 8192)
        try log.append((0..<4).map { testReading($0) })

        let run = try FollowerRun(directory: dir.path)
        #expect(await eventually { run.received.seqs().count == 4 })

        // Appends to the current file, then batches that rotate (and let retention delete).
        var number = 4
        for batchSize in [1, 1, 3, 7, 1, 20, 2, 30, 1, 25, 30, 1] {
            try log.append((0..<batchSize).map { testReading(number + $0) })
            number += batchSize
            #expect(await eventually { run.received.seqs().count >= number })
        }
        try log.appendGap(count: 5, device: testDevice, at: testDate)
        let total = number + 1
        let oldest = try #require(try dir.logFiles().first)
        #expect((LogFileName.firstSeq(of: oldest) ?? 0) > 1)  // retention has deleted the first files
        #expect(await eventually { run.received.seqs().count >= total })

        // A line the daemon is still writing: printed once it is whole.
        log.close()
        let name = try #require(try dir.logFiles().last)
        let next = Array(#"{"ts":"2026-11-21T13:45:13.000Z","seq":\#(total + 1),"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":1}"#.utf8)
        try dir.append(Array(next.prefix(50)), to: name)
        try dir.append(Array(next.dropFirst(50)) + [UInt8(ascii: "\n")], to: name)
        #expect(await eventually { run.received.seqs().count >= total + 1 })

        #expect(await run.stop())
        #expect(run.received.seqs() == Array(1...UInt64(total + 1)))
        #expect(run.received.records().compactMap { $0.flatMap(readingNumber) } == Array(0..<(total - 1)))
        #expect(run.received.partialBatches == 0)
        if case .failure(let error) = run.finished { Issue.record("follower failed: \(error)") }
    }

    @Test func followStartsInAnEmptyDirectoryAndHonoursSince() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let run = try FollowerRun(directory: dir.path, since: testDate)
        let log = try ReadingLog(directory: dir.path, rotateSize: 1024, retainSize: 1 << 30)
        try log.append([testReading(0, at: testDate - 1), testReading(1, at: testDate), testReading(2, at: testDate + 1)])
        #expect(await eventually { run.received.seqs().count >= 2 })
        log.close()
        #expect(await run.stop())
        #expect(run.received.records().compactMap { $0.flatMap(readingNumber) } == [1, 2])
    }

    @Test func followEndsWhenTheDirectoryIsRemoved() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let watched = dir.path + "/readings"
        try FileManager.default.createDirectory(atPath: watched, withIntermediateDirectories: false)
        let run = try FollowerRun(directory: watched)
        try FileManager.default.removeItem(atPath: watched)
        #expect(await eventually { run.finished != nil })
        guard case .failure(let error) = run.finished else {
            Issue.record("follower did not report the removed directory")
            return
        }
        #expect((error as? ReadingLogError)?.code == ENOENT)
    }

    @Test func stopBeforeAnythingIsWrittenEndsTheFollower() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let run = try FollowerRun(directory: dir.path)
        #expect(await run.stop())
        if case .failure(let error) = run.finished { Issue.record("follower failed: \(error)") }
    }
}
