@testable import Configuration
import Foundation
import Pacing
@_spi(FaultInjection) @testable import Readings
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under the system temp dir; call `remove()` when done.
final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("tether-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Our log files in the directory, oldest first.
    func logFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".jsonl") }.sorted()
    }

    func contents(of name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path + "/" + name)))
    }

    func append(_ bytes: [UInt8], to name: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + "/" + name))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(bytes))
    }

    func write(_ bytes: [UInt8], to name: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path + "/" + name))
    }
}

let testDevice = "AA:BB:CC:DD:EE:FF"
/// 2026-11-21T13:45:12.345Z, plus half a millisecond so binary rounding cannot make it .344.
let testDate = Date(timeIntervalSince1970: 1_795_268_712.3455)

func testReading(_ number: Int, at date: Date = testDate, source: Reading.Source = .notify) -> Reading {
    Reading(
        receivedAt: date, device: testDevice, characteristic: ConfigUUID.nusTX, source: source,
        payload: [UInt8(number >> 8 & 0xff), UInt8(number & 0xff)]
    )
}

/// The reading number encoded by `testReading`.
func readingNumber(_ record: ReadingRecord) -> Int? {
    guard let payload = record.payload, payload.count == 2 else { return nil }
    return Int(payload[0]) << 8 | Int(payload[1])
}

@Suite("Readings log")
struct ReadingLogTests {
    @Test func recordHasExactShape() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let boot = BootStamp(bootID: "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11", sinceBoot: .milliseconds(83_004_017) + .microseconds(900), clockSynchronised: false)
        let reading = Reading(receivedAt: testDate, device: testDevice, characteristic: ConfigUUID.nusTX, source: .notify, payload: [0x0a, 0x0b, 0x0c], boot: boot)
        #expect(try log.append([reading]) == 1...1)
        try log.append([Reading(receivedAt: testDate, device: testDevice, characteristic: ConfigUUID.nusRX, source: .read, payload: [])])
        try log.appendGap(count: 42, device: testDevice, at: testDate)
        log.close()

        let files = try dir.logFiles()
        #expect(files == ["readings-00000000000000000001.jsonl"])
        let text = String(decoding: try dir.contents(of: files[0]), as: UTF8.self)
        #expect(text == """
            {"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"AA:BB:CC:DD:EE:FF","char":"6e400003-b5a3-f393-e0a9-e50e24dcca9e","source":"notify","hex":"0a0b0c","v":2,"boot_id":"0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11","boot_ms":83004017,"clock_synced":false}
            {"ts":"2026-11-21T13:45:12.345Z","seq":2,"device":"AA:BB:CC:DD:EE:FF","char":"6e400002-b5a3-f393-e0a9-e50e24dcca9e","source":"read","hex":"","v":2}
            {"ts":"2026-11-21T13:45:12.345Z","seq":3,"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":42,"v":2}

            """)
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == [1, 2, 3])
        #expect(records[0].payload == [0x0a, 0x0b, 0x0c])
        #expect(records[1].payload == [])
        #expect(records[0].bootID == boot.bootID && records[0].bootMilliseconds == 83_004_017 && records[0].clockSynchronised == false)
        #expect(records[2] == ReadingRecord(ts: "2026-11-21T13:45:12.345Z", seq: 3, device: testDevice, source: "gap", count: 42, version: 2))
        #expect(records[2].payload == nil)
    }

    @Test func stringsAreEscaped() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let awkward = "q\"b\\n\nt\tc\u{1}d\u{7f}é☃"
        try log.append([Reading(receivedAt: testDate, device: awkward, characteristic: "c\"", payload: [0xff])])
        log.close()
        let line = String(decoding: try dir.contents(of: try dir.logFiles()[0]), as: UTF8.self)
        #expect(line.contains(#""device":"q\"b\\n\nt\tc\u0001d\u007fé☃""#))
        #expect(line.filter { $0 == "\n" }.count == 1)
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.first?.device == awkward)
        #expect(records.first?.char == "c\"")
        #expect(records.first?.hex == "ff")
    }

    @Test(arguments: [
        (0.0, "1970-01-01T00:00:00.000Z"),
        (1_709_251_199.9995, "2024-02-29T23:59:59.999Z"),
        (951_782_400.0, "2000-02-29T00:00:00.000Z"),
        (4_107_542_400.0, "2100-03-01T00:00:00.000Z"),
        (-5.0, "1970-01-01T00:00:00.000Z"),
        (1e300, "9999-12-31T23:59:59.999Z"),
        (Double.nan, "1970-01-01T00:00:00.000Z"),
        (Double.infinity, "9999-12-31T23:59:59.999Z"),
    ] as [(Double, String)])
    func timestamps(seconds: Double, expected: String) {
        #expect(UTCTimestamp.string(Date(timeIntervalSince1970: seconds)) == expected)
    }

    @Test func timestampsAgreeWithFoundation() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var rng = SplitMix64(seed: 7)
        for _ in 0..<500 {
            // Whole milliseconds, so both sides agree on rounding.
            let milliseconds = Double(rng.next() % 7_000_000_000_000)
            let date = Date(timeIntervalSince1970: milliseconds / 1000 + 0.0002)
            #expect(UTCTimestamp.string(date) == formatter.string(from: date))
        }
    }

    @Test func seqContinuesAcrossReopen() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
            #expect(log.recovery.file == nil)
            #expect(log.recovery.lastSeq == 0)
            #expect(try log.append((0..<3).map { testReading($0) }) == 1...3)
            try log.sync()
            log.close()
        }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(log.recovery.lastSeq == 3)
        #expect(log.recovery.truncatedBytes == 0)
        #expect(log.lastSeq == 3)
        #expect(try log.append([testReading(3)]) == 4...4)
        log.close()
        #expect(try ReadingLog.readRecords(directory: dir.path).map(\.seq) == [1, 2, 3, 4])
        #expect(try dir.logFiles().count == 1)
    }

    @Test func emptyAppendUsesNoSeq() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(try log.append([Reading]()) == nil)
        #expect(log.lastSeq == 0)
        #expect(try dir.logFiles().isEmpty)
    }

    /// Writes three readings, damages the end of the file with `damage`, reopens.
    private func reopenAfterDamage(_ damage: [UInt8]) throws -> (ReadingLog.Recovery, [ReadingRecord], [UInt8]) {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try first.append((0..<3).map { testReading($0) })
        first.close()
        let name = try dir.logFiles()[0]
        let intact = try dir.contents(of: name)
        try dir.append(damage, to: name)

        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let recovery = log.recovery
        #expect(try dir.contents(of: name) == intact)
        #expect(try log.append([testReading(3)]) == 4...4)
        log.close()
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == [1, 2, 3, 4])
        #expect(records.compactMap(readingNumber) == [0, 1, 2, 3])
        let bytes = try dir.contents(of: name)
        return (recovery, records, bytes)
    }

    @Test func partialLastLineIsTruncated() throws {
        let partial = Array(#"{"ts":"2026-11-21T13:45:12.345Z","seq":4,"dev"#.utf8)
        let (recovery, _, _) = try reopenAfterDamage(partial)
        #expect(recovery.truncatedBytes == partial.count)
        #expect(recovery.lastSeq == 3)
        #expect(recovery.file?.hasSuffix("readings-00000000000000000001.jsonl") == true)
    }

    @Test func trailingNULsAreTruncated() throws {
        let (recovery, _, _) = try reopenAfterDamage([UInt8](repeating: 0, count: 4096))
        #expect(recovery.truncatedBytes == 4096)
        #expect(recovery.lastSeq == 3)
    }

    @Test func garbageLastLinesAreTruncated() throws {
        let garbage = Array("{\"hello\":1}\nnot json at all\n\u{0}\u{0}{\"ts\":\"x\",\"seq\":9,\"device\":\"d\",\"source\":\"notify\"}\n".utf8)
        let (recovery, _, _) = try reopenAfterDamage(garbage)
        #expect(recovery.truncatedBytes == garbage.count)
        #expect(recovery.lastSeq == 3)
    }

    @Test func wholeRecordMissingOnlyItsNewlineIsKept() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try first.append((0..<3).map { testReading($0) })
        first.close()
        let name = try dir.logFiles()[0]
        try dir.write(Array(try dir.contents(of: name).dropLast()), to: name)

        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(log.recovery.lastSeq == 3)
        #expect(log.recovery.truncatedBytes == 0)
        try log.append([testReading(3)])
        log.close()
        #expect(try ReadingLog.readRecords(directory: dir.path).map(\.seq) == [1, 2, 3, 4])
    }

    @Test func newestFileWithoutRecordsContinuesFromThePreviousFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1 << 30)
        for number in 0..<60 { try first.append([testReading(number)]) }
        first.close()
        let files = try dir.logFiles()
        #expect(files.count >= 2)
        let newest = try #require(files.last)
        let newestFirstSeq = try #require(UInt64(newest.dropFirst("readings-".count).dropLast(".jsonl".count)))
        try dir.write([UInt8](repeating: 0, count: 100) + Array("junk".utf8), to: newest)

        let log = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1 << 30)
        #expect(log.recovery.lastSeq == newestFirstSeq - 1)
        #expect(log.recovery.truncatedBytes == 104)
        #expect(try log.append([testReading(1000)]) == newestFirstSeq...newestFirstSeq)
        log.close()
        #expect(try dir.logFiles() == files)
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...newestFirstSeq))
    }

    @Test func seqNeverGoesBackEvenIfEveryRecordIsLost() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write(Array("garbage".utf8), to: "readings-00000000000000000500.jsonl")
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(log.recovery.lastSeq == 499)
        #expect(try log.append([testReading(0)]) == 500...500)
        log.close()
        #expect(try dir.logFiles() == ["readings-00000000000000000500.jsonl"])
    }

    @Test func exhaustedSeqIsAnErrorNotATrap() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write([], to: "readings-00000000000000000000.jsonl")
        try dir.write([], to: "readings-18446744073709551615.jsonl")
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(log.lastSeq == UInt64.max - 1)
        #expect(try log.append([testReading(0)]) == UInt64.max...UInt64.max)
        #expect(throws: ReadingLogError.self) { try log.append([testReading(1)]) }
        log.close()
    }

    @Test func rotatesAtRotateSizeAndReadsAcrossFilesInOrder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let rotateSize: Int64 = 4096
        let log = try ReadingLog(directory: dir.path, rotateSize: rotateSize, retainSize: 1 << 30)
        var number = 0
        for batch in [1, 7, 3, 30, 1, 12, 46] {
            try log.append((number..<number + batch).map { testReading($0) })
            number += batch
        }
        try log.sync()
        log.close()

        let files = try dir.logFiles()
        #expect(files.count > 3)
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...UInt64(number)))
        #expect(records.compactMap(readingNumber) == Array(0..<number))
        let lineLength = try dir.contents(of: files[0]).split(separator: UInt8(ascii: "\n")).first.map { $0.count + 1 } ?? 0
        for name in files {
            let bytes = try dir.contents(of: name)
            #expect(bytes.count <= rotateSize)
            // Every file but the last is full: another line would not have fitted.
            if name != files.last { #expect(bytes.count + lineLength > rotateSize) }
            let firstLine = try #require(bytes.split(separator: UInt8(ascii: "\n")).first)
            let firstRecord = try JSONDecoder().decode(ReadingRecord.self, from: Data(firstLine))
            #expect(name == LogFileName.name(firstSeq: firstRecord.seq))
        }
    }

    @Test func oneHugeAppendSpansManyFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1 << 30)
        #expect(try log.append((0..<1000).map { testReading($0) }) == 1...1000)
        try log.sync()
        log.close()
        #expect(try dir.logFiles().count > 20)
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == Array(0..<1000))
    }

    @Test func retentionDeletesOldestFilesButNeverTheCurrentOne() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 12_000)
        for number in 0..<400 { try log.append([testReading(number)]) }
        let files = try dir.logFiles()
        let sizes = try files.map { try dir.contents(of: $0).count }
        #expect(sizes.reduce(0, +) <= 12_000)
        #expect(files.count == 3)
        // What is left is the newest readings, without holes.
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.last?.seq == 400)
        #expect(records.map(\.seq) == Array((records.first?.seq ?? 0)...400))
        // A tiny budget still keeps the file being written.
        log.close()
        let tight = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1)
        #expect(try dir.logFiles() == [files[files.count - 1]])
        try tight.append([testReading(400)])
        tight.close()
    }

    @Test func failedWriteIsRolledBackAndConsumesNoSeq() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1 << 30)
        try log.append((0..<10).map { testReading($0) })
        let before = try dir.logFiles().map { try dir.contents(of: $0) }

        // Half of each write lands, then the disk is full: partial data must be undone.
        log.writeCall = { fd, bytes in
            let half = bytes.count / 2
            guard half > 0 else { return -Int(ENOSPC) }
            let written = Glibc.write(fd, bytes.baseAddress, half)
            return written > 0 ? written : -Int(ENOSPC)
        }
        let batch = (10..<60).map { testReading($0) }  // spans several files
        #expect(throws: ReadingLogError.self) { try log.append(batch) }
        #expect(log.lastSeq == 10)
        #expect(try dir.logFiles().map { try dir.contents(of: $0) } == before)

        log.writeCall = LogFileSystem.systemWrite
        #expect(try log.append(batch) == 11...60)
        log.close()
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...60))
        #expect(records.compactMap(readingNumber) == Array(0..<60))
    }

    @Test func bytesLeftByARollbackThatCouldNotTruncateAreCutBeforeTheNextAppend() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append([testReading(0)])
        // A write that fails half-way, and a rollback whose ftruncate fails
        // too (EIO): part of a record is left behind the counted size.
        log.writeCall = { fd, bytes in
            let written = Glibc.write(fd, bytes.baseAddress, bytes.count / 2)
            return written > 0 && written < bytes.count ? -Int(EIO) : written
        }
        log.truncateCall = { _, _ in -EIO }
        #expect(throws: ReadingLogError.self) { try log.append([testReading(1), testReading(2)]) }
        let name = try dir.logFiles()[0]
        #expect(try dir.contents(of: name).count > 0)
        log.writeCall = LogFileSystem.systemWrite
        log.truncateCall = LogFileSystem.systemTruncate
        #expect(try log.append([testReading(1)]) == 2...2)
        log.close()
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == [1, 2])
        #expect(records.compactMap(readingNumber) == [0, 1])
    }

    @Test func shortWritesAndEINTRAreRetried() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let calls = Counter()
        log.writeCall = { fd, bytes in
            // Alternate EINTR with 7-byte writes.
            if calls.increment() % 2 == 1 { return -Int(EINTR) }
            return Glibc.write(fd, bytes.baseAddress, min(7, bytes.count))
        }
        try log.append((0..<5).map { testReading($0) })
        log.close()
        #expect(try ReadingLog.readRecords(directory: dir.path).compactMap(readingNumber) == Array(0..<5))
    }

    @Test func readRecordsSkipsDamagedLines() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append([testReading(0)])
        log.close()
        let name = try dir.logFiles()[0]
        try dir.append(Array("oops\n".utf8), to: name)
        try dir.append(Array(String(decoding: try dir.contents(of: name).prefix(while: { $0 != 10 }), as: UTF8.self).utf8) + [10], to: name)
        #expect(try ReadingLog.readRecords(directory: dir.path).count == 2)
        try dir.write(Array("ignored".utf8), to: "notes.txt")
        #expect(try ReadingLog.readRecords(directory: dir.path).count == 2)
    }

    @Test func createsNestedDirectoryWithMode0750() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/a/b/readings"
        let log = try ReadingLog(directory: path, rotateSize: 1 << 20, retainSize: 1 << 30)
        log.close()
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        let mode = try #require(attributes[.posixPermissions] as? Int)
        #expect(mode & 0o027 == 0)  // umask may take bits away, never add them
        #expect(mode & 0o700 == 0o700)
    }

    @Test func openingAFileAsDirectoryFails() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write([1], to: "file")
        #expect(throws: ReadingLogError.self) {
            _ = try ReadingLog(directory: dir.path + "/file", rotateSize: 1 << 20, retainSize: 1 << 30)
        }
    }
}

/// A thread-safe counter for fault-injection closures.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0

    func increment() -> Int {
        lock.withLock {
            value += 1
            return value
        }
    }

    var current: Int { lock.withLock { value } }

    @Test func aSecondWriterOnTheSameDirectoryIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(throws: ReadingLogError.self) {
            _ = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        }
        first.close()
        // Closing releases the directory for the next writer.
        let second = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        second.close()
    }
}
