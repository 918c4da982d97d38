import Foundation
@testable import Readings
import Testing

/// Readings-log start-up recovery on damaged or hand-made files: regressions
/// found by `make fuzz` (reading-log target, Fuzz/README.md), replayed through
/// the same path: files written as the fuzzer wrote them, then `ReadingLog.init`.
@Suite("Readings log recovery (fuzz regressions)")
struct ReadingLogRecoveryFuzzTests {
    /// Found as an out-of-memory: a file whose tail is 94 KiB of newlines. Each
    /// empty line cost recovery a fresh 64 KiB read backwards, so a tail of N short
    /// invalid lines read N × 64 KiB (a megabyte of newlines: 64 GiB, a start-up
    /// that never ends). Recovery now reads each byte once.
    @Test func aTailOfNewlinesIsCutInOnePass() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let name = "readings-00000000000000000001.jsonl"
        let crasher = [UInt8](repeating: 0, count: 7) + [0x89, 0xff] + [UInt8](repeating: UInt8(ascii: "\n"), count: 94 << 10)
        try dir.write(crasher, to: name)
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        #expect(log.recovery.truncatedBytes == crasher.count)
        #expect(log.recovery.lastSeq == 0)
        log.close()
        #expect(try dir.contents(of: name).isEmpty)
    }

    /// The same at a scale where the old cost shows: three records, then four
    /// million newlines (a chunk-sized read each would be 256 GiB).
    @Test(.timeLimit(.minutes(1)))
    func millionsOfEmptyLinesAfterTheRecordsDoNotStallStartUp() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try ReadingLog(directory: dir.path, rotateSize: 1 << 30, retainSize: 1 << 30)
        try first.append((0..<3).map { testReading($0) })
        first.close()
        let name = try dir.logFiles()[0]
        let intact = try dir.contents(of: name)
        try dir.append([UInt8](repeating: UInt8(ascii: "\n"), count: 4 << 20), to: name)

        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 30, retainSize: 1 << 30)
        #expect(log.recovery.truncatedBytes == 4 << 20)
        #expect(log.recovery.lastSeq == 3)
        log.close()
        #expect(try dir.contents(of: name) == intact)
    }

    /// Found as a lost file: the newest file's name says its records start at seq
    /// 4294901761, but it holds seqs 1…30 (restored or edited by hand). Recovery
    /// continued after seq 4294901760, so the first append, rotating at 4 KiB,
    /// created "the next file" under the current file's own name, truncating it:
    /// thirty records gone. The seq now continues after the name's first seq.
    @Test func rotationNeverTruncatesTheFileItRotatesAwayFrom() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let name = "readings-00000000004294901761.jsonl"
        let records = (1...30).flatMap { seq in
            Array((#"{"ts":"2026-11-21T13:45:12.345Z","seq":\#(seq),"device":"AA:BB:CC:DD:EE:FF","#
                + #""char":"6e400003-b5a3-f393-e0a9-e50e24dcca9e","source":"notify","hex":"0a0b0c"}"# + "\n").utf8)
        }
        #expect(records.count > 4096)
        try dir.write(records, to: name)

        let log = try ReadingLog(directory: dir.path, rotateSize: 4096, retainSize: 1 << 40)
        #expect(log.recovery.truncatedBytes == 0)
        #expect(log.lastSeq == 4_294_901_761)
        #expect(try log.append([testReading(0)]) == 4_294_901_762...4_294_901_762)
        log.close()
        #expect(try dir.logFiles() == [name, "readings-00000000004294901762.jsonl"])
        #expect(try dir.contents(of: name) == records)
        #expect(try ReadingLog.readRecords(directory: dir.path).map(\.seq) == Array(1...30) + [4_294_901_762])
    }
}
