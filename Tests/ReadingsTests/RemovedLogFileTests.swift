import Foundation
@testable import Readings
import Testing

/// Someone removes the file Tether appends to, or the whole readings
/// directory, while it runs (an operator's `rm`, a clean-up job): the
/// readings already written and those that follow stay on disk.
@Suite("Readings log: removed under the writer")
struct RemovedLogFileTests {
    @Test func aRemovedFileIsWrittenBackAtTheNextSync() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((0..<5).map { testReading($0) })
        try log.sync()
        let name = try #require(try dir.logFiles().first)
        try FileManager.default.removeItem(atPath: dir.path + "/" + name)
        try log.append((5..<8).map { testReading($0) })  // to the removed file, through its descriptor
        try log.sync()
        #expect(log.restoredFiles == [dir.path + "/" + name])
        try log.append((8..<10).map { testReading($0) })
        try log.sync()
        log.close()
        let records = try ReadingLog.readRecords(directory: dir.path)
        #expect(records.map(\.seq) == Array(1...10))
        #expect(records.compactMap(readingNumber) == Array(0..<10))
    }

    @Test func aRemovedDirectoryIsMadeAgainWithItsLock() throws {
        let parent = try TemporaryDirectory()
        defer { parent.remove() }
        let path = parent.path + "/readings"
        let log = try ReadingLog(directory: path, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((0..<3).map { testReading($0) })
        try log.sync()
        try FileManager.default.removeItem(atPath: path)
        try log.append([testReading(3)])
        try log.sync()
        #expect(log.restoredFiles.count == 1)
        // The lock was taken again on the new directory: a second writer is refused.
        #expect(throws: ReadingLogError.self) { try ReadingLog(directory: path, rotateSize: 1 << 20, retainSize: 1 << 30) }
        log.close()
        #expect(try ReadingLog.readRecords(directory: path).map(\.seq) == [1, 2, 3, 4])
        let reopened = try ReadingLog(directory: path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(reopened.lastSeq == 4)
        reopened.close()
    }

    @Test func aRotationIntoARemovedDirectoryFailsOnceThenSucceeds() throws {
        let parent = try TemporaryDirectory()
        defer { parent.remove() }
        let path = parent.path + "/readings"
        // Every record fills a file: the next append must create one.
        let log = try ReadingLog(directory: path, rotateSize: 1, retainSize: 1 << 30)
        try log.append([testReading(0)])
        try log.sync()
        try FileManager.default.removeItem(atPath: path)
        #expect(throws: ReadingLogError.self) { try log.append([testReading(1)]) }
        // The retry (the recorder's, a second later) makes the directory again.
        #expect(try log.append([testReading(1)]) == 2...2)
        try log.sync()
        log.close()
        #expect(try ReadingLog.readRecords(directory: path).map(\.seq) == [1, 2])
    }

    @Test func retentionCountsOnlyTheFilesThatAreThere() throws {
        let parent = try TemporaryDirectory()
        defer { parent.remove() }
        let path = parent.path + "/readings"
        var line: [UInt8] = []
        RecordFormat.appendReading(testReading(0), seq: 1, to: &line)
        let record = line.count  // seqs 1 to 9: every record this long
        // Two records a file, three files kept at most.
        let log = try ReadingLog(directory: path, rotateSize: Int64(record * 2), retainSize: Int64(record * 6))
        try log.append((0..<6).map { testReading($0) })
        try log.sync()
        try FileManager.default.removeItem(atPath: path)
        // The newest file is full: the next record needs a new one, in a
        // directory that is gone. The retry makes it again.
        #expect(throws: ReadingLogError.self) { try log.append([testReading(6)]) }
        try log.append((6..<9).map { testReading($0) })
        try log.sync()
        log.close()
        // The newest file written back, the new ones beside it, nothing of
        // them deleted for files that went with the directory.
        #expect(try ReadingLog.readRecords(directory: path).map(\.seq) == [5, 6, 7, 8, 9])
    }
}
