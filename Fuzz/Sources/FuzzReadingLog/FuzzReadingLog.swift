#if canImport(Glibc)
import Glibc
#endif
import Foundation
import FuzzSupport
import Readings

// Readings-log recovery on arbitrary file contents.
//
// The input becomes one or two readings files in a scratch directory (layout
// below). Then, each step checked against a plain model written from the
// format's description:
//  1. `tether readings` (ReadingLogReader) on the damaged directory delivers
//     exactly the complete, record-shaped lines, each seq once, in order;
//  2. the daemon's start-up recovery (ReadingLog.init) cuts each file back to
//     just after its last well-formed record (restoring a lost newline), empties
//     a newest file without one and deletes an older one, and continues the seq
//     after that record and after the seq the newest file's name implies (its
//     first seq itself if it keeps a record, as it then has used it);
//  3. an append gets the next seq and is the new last line, or is refused
//     without a trap when the seqs are exhausted;
//  4. the reader agrees with the model again, and a second start-up finds
//     nothing to repair and continues after the appended record.
//
// Input layout: a flags byte, then
//   bit 0: the newest file's first seq, 8 bytes little-endian (else 1, or 6 after
//          an older file; at least 2 then);
//   bit 1: an older file too, first seq 1: its contents run up to the first 0xFF byte;
//   bit 2: after the newest file's contents, a filler: 2 bytes, (count / 1 KiB, byte),
//          e.g. NULs where a power loss left the file longer than its data;
//   bit 3: rotate at 4 KiB instead of 1 MiB;
//   bit 4: append a gap record instead of a reading;
//   bit 5: the reader's --since, one byte picking a cutoff from `cutoffs`;
// and the rest: the newest file's contents.

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(inputBytes(data, size))
    let flags = input.byte()
    var newestFirstSeq: UInt64 = flags & 1 != 0 ? input.integer() : flags & 2 != 0 ? 6 : 1
    var files: [(firstSeq: UInt64, contents: [UInt8])] = []
    if flags & 2 != 0 {
        let rest = input.bytes.suffix(from: min(input.position, input.bytes.count))
        let older = Array(rest.prefix { $0 != 0xff })
        _ = input.bytes(older.count + 1)
        files.append((1, older))
        newestFirstSeq = max(newestFirstSeq, 2)
    }
    var filler: [UInt8] = []
    if flags & 4 != 0 {
        let kilobytes = Int(input.byte())
        filler = [UInt8](repeating: input.byte(), count: kilobytes << 10)
    }
    let rotateSize: Int64 = flags & 8 != 0 ? 4096 : 1 << 20
    let appendGap = flags & 16 != 0
    let cutoff = flags & 32 != 0 ? cutoffs[Int(input.byte()) % cutoffs.count] : nil
    files.append((newestFirstSeq, input.rest() + filler))

    let directory = scratch.fresh()
    for file in files { writeFile(directory + "/" + fileName(file.firstSeq), file.contents) }

    // 1. The reader on the damaged files.
    checkReader(directory, cutoff: cutoff, expected: Model.delivered(files.map(\.contents), cutoff: cutoff))

    // 2. Recovery.
    var expectedFiles = files
    var expectedLastSeq: UInt64 = newestFirstSeq > 0 ? newestFirstSeq - 1 : 0
    var expectedTruncated = 0
    for index in files.indices.reversed() {
        let contents = files[index].contents
        if let good = Model.lastGoodRecord(contents) {
            // A newest file with records has used at least the seq its name starts at.
            expectedLastSeq = max(expectedLastSeq, good.seq, index == files.count - 1 ? files[index].firstSeq : 0)
            expectedTruncated += contents.count - good.end
            expectedFiles[index].contents = Array(contents[..<good.end]) + (good.needsNewline ? [UInt8(ascii: "\n")] : [])
            break
        }
        // No record: the newest file is emptied and kept to append to, an older one deleted.
        expectedTruncated += contents.count
        if index == files.count - 1 { expectedFiles[index].contents = [] } else { expectedFiles.remove(at: index) }
    }
    let log: ReadingLog
    do {
        log = try ReadingLog(directory: directory, rotateSize: rotateSize, retainSize: 1 << 40)
    } catch {
        require(false, "recovery failed: \(error)")
        return 0
    }
    require(log.recovery.lastSeq == expectedLastSeq && log.lastSeq == expectedLastSeq,
            "recovery continues after seq \(log.recovery.lastSeq), expected \(expectedLastSeq)")
    require(log.recovery.truncatedBytes == expectedTruncated, "recovery cut \(log.recovery.truncatedBytes) bytes, expected \(expectedTruncated)")
    require(log.recovery.file == directory + "/" + fileName(newestFirstSeq), "recovery names \(log.recovery.file ?? "-")")
    checkFiles(directory, expectedFiles)

    // 3. An append.
    let date = Date(timeIntervalSince1970: 1_795_268_712.3455)  // 2026-11-21T13:45:12.345Z
    let device = "AA:BB:CC:DD:EE:FF", characteristic = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
    let payload: [UInt8] = [UInt8(truncatingIfNeeded: size), 0x00, 0xff]
    var lastSeq = expectedLastSeq
    do {
        if appendGap {
            try log.appendGap(count: 7, device: device, at: date)
        } else {
            let range = try log.append([Reading(receivedAt: date, device: device, characteristic: characteristic, payload: payload)])
            require(expectedLastSeq < UInt64.max, "an append after seq \(UInt64.max) succeeded")
            require(range == (expectedLastSeq + 1)...(expectedLastSeq + 1), "the append used seqs \(String(describing: range))")
        }
        require(expectedLastSeq < UInt64.max, "an append after seq \(UInt64.max) succeeded")
        lastSeq = expectedLastSeq + 1
        require(log.lastSeq == lastSeq, "lastSeq \(log.lastSeq) after appending seq \(lastSeq)")
        // The record goes to the newest file, or starts a new one if it would take
        // a non-empty newest file past the rotate size.
        let newest = expectedFiles[expectedFiles.count - 1]
        let grown = (try? readFile(directory + "/" + fileName(newest.firstSeq))) ?? []
        if grown.count > newest.contents.count {
            require(grown.starts(with: newest.contents), "the append changed what was in \(fileName(newest.firstSeq))")
            require(newest.contents.isEmpty || grown.count <= rotateSize, "\(fileName(newest.firstSeq)) grew past the rotate size")
            expectedFiles[expectedFiles.count - 1].contents = grown
        } else {
            let rotated = (try? readFile(directory + "/" + fileName(lastSeq))) ?? []
            require(!newest.contents.isEmpty && newest.contents.count + rotated.count > rotateSize,
                    "the record of \(rotated.count) bytes is not in \(fileName(newest.firstSeq)) (\(newest.contents.count) bytes)")
            expectedFiles.append((lastSeq, rotated))
        }
        let appended = Array(expectedFiles[expectedFiles.count - 1].contents.dropLast().split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).last ?? [])
        guard let record = Model.wellFormedRecord(appended) else {
            require(false, "the appended line is not a well-formed record: \(String(decoding: appended, as: UTF8.self))")
            return 0
        }
        require(record.seq == lastSeq && record.ts == "2026-11-21T13:45:12.345Z" && record.device == device, "appended \(record)")
        if appendGap {
            require(record.source == "gap" && record.count == 7, "appended \(record)")
        } else {
            require(record.source == "notify" && record.char == characteristic && record.payload == payload, "appended \(record)")
        }
    } catch {
        require(expectedLastSeq == UInt64.max, "an append after seq \(expectedLastSeq) failed: \(error)")
    }
    do { try log.sync() } catch { require(false, "sync failed: \(error)") }
    log.close()
    checkFiles(directory, expectedFiles)

    // 4. The reader again, and a second start-up.
    checkReader(directory, cutoff: cutoff, expected: Model.delivered(expectedFiles.map(\.contents), cutoff: cutoff))
    do {
        let again = try ReadingLog(directory: directory, rotateSize: rotateSize, retainSize: 1 << 40)
        require(again.recovery.truncatedBytes == 0, "a second start-up cut \(again.recovery.truncatedBytes) bytes")
        require(again.lastSeq == lastSeq, "a second start-up continues after \(again.lastSeq), expected \(lastSeq)")
        again.close()
    } catch {
        require(false, "a second start-up failed: \(error)")
    }
    checkFiles(directory, expectedFiles)
    return 0
}

/// `since` values and their timestamps, around the records the seeds hold.
let cutoffs: [(date: Date, text: String)] = [
    (Date(timeIntervalSince1970: 1_795_268_712.3455), "2026-11-21T13:45:12.345Z"),
    (Date(timeIntervalSince1970: 1_795_268_712.3465), "2026-11-21T13:45:12.346Z"),
    (Date(timeIntervalSince1970: 1_795_268_712.3445), "2026-11-21T13:45:12.344Z"),
    (Date(timeIntervalSince1970: 0), "1970-01-01T00:00:00.000Z"),
    (Date(timeIntervalSince1970: 1_893_456_000.0005), "2030-01-01T00:00:00.000Z"),
]

func checkReader(_ directory: String, cutoff: (date: Date, text: String)?, expected: [UInt8]) {
    var delivered: [UInt8] = []
    do {
        let reader = try ReadingLogReader(directory: directory, since: cutoff?.date)
        try reader.readAvailable { batch in
            require(batch.last == UInt8(ascii: "\n"), "a batch that does not end in a newline")
            delivered += batch
        }
        // Nothing changed: a second call delivers nothing.
        try reader.readAvailable { batch in require(batch.isEmpty, "\(batch.count) bytes delivered twice") }
    } catch {
        require(false, "the reader failed: \(error)")
    }
    require(delivered == expected, "the reader delivered\n\(String(decoding: delivered, as: UTF8.self))\nexpected\n\(String(decoding: expected, as: UTF8.self))")
}

func checkFiles(_ directory: String, _ expected: [(firstSeq: UInt64, contents: [UInt8])]) {
    let names = listFiles(directory).filter { $0.hasPrefix("readings-") }.sorted()
    require(names == expected.map { fileName($0.firstSeq) }, "files \(names), expected \(expected.map { fileName($0.firstSeq) })")
    for file in expected {
        let contents = try? readFile(directory + "/" + fileName(file.firstSeq))
        require(contents == file.contents, "\(fileName(file.firstSeq)) holds \(contents?.count ?? -1) bytes, expected \(file.contents.count)")
    }
}

// MARK: - Model

/// The format as README.md and the sources' comments describe it.
enum Model {
    /// Recovery does not read lines longer than this (no record is nearly that long).
    static let maximumLineLength = 64 << 10
    /// The reader reads 64 KiB at a time and skips a line that does not fit.
    static let readerChunk = 64 << 10
    static let timestampPrefix = Array(#"{"ts":""#.utf8), seqPrefix = Array(#"","seq":"#.utf8)
    static let timestampLength = 24

    /// A line (without its newline) that is a record the daemon could have written.
    static func wellFormedRecord(_ line: some Collection<UInt8>) -> ReadingRecord? {
        guard let record = try? JSONDecoder().decode(ReadingRecord.self, from: Data(line)) else { return nil }
        guard record.seq >= 1, record.ts.utf8.count == 24, record.ts.hasSuffix("Z") else { return nil }
        switch record.source {
        case "notify", "read": return record.char != nil && record.payload != nil && record.count == nil ? record : nil
        case "gap": return (record.count ?? -1) >= 0 && record.char == nil && record.hex == nil ? record : nil
        default: return nil
        }
    }

    /// The last well-formed record of a file, the offset just past it (and its
    /// newline, if it has one), and whether its newline is missing.
    static func lastGoodRecord(_ contents: [UInt8]) -> (seq: UInt64, end: Int, needsNewline: Bool)? {
        var lineEnd = contents.count
        var terminated = false
        while true {
            let newline = contents[..<lineEnd].lastIndex(of: UInt8(ascii: "\n"))
            let start = newline.map { $0 + 1 } ?? 0
            if lineEnd > start, lineEnd - start <= maximumLineLength, let record = wellFormedRecord(contents[start..<lineEnd]) {
                return (record.seq, terminated ? lineEnd + 1 : lineEnd, !terminated)
            }
            guard let newline else { return nil }
            lineEnd = newline
            terminated = true
        }
    }

    /// The seq of a line shaped like a record (`{"ts":"<24 bytes>","seq":<digits>,` … `}`).
    static func recordSeq(_ line: ArraySlice<UInt8>) -> UInt64? {
        let bytes = Array(line)
        let seqStart = timestampPrefix.count + timestampLength + seqPrefix.count
        guard bytes.count > seqStart + 2, bytes.last == UInt8(ascii: "}"), bytes.starts(with: timestampPrefix),
              bytes[timestampPrefix.count + timestampLength - 1] == UInt8(ascii: "Z"),
              bytes[(timestampPrefix.count + timestampLength)...].starts(with: seqPrefix)
        else { return nil }
        let digits = bytes[seqStart...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard !digits.isEmpty, seqStart + digits.count < bytes.count, bytes[seqStart + digits.count] == UInt8(ascii: ",") else { return nil }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }

    /// What `tether readings [--since]` prints for these files (oldest first).
    static func delivered(_ files: [[UInt8]], cutoff: (date: Date, text: String)?) -> [UInt8] {
        var first = 0
        if let cutoff {
            // A file whose successor starts before the cutoff holds nothing to print.
            let cut = Array(cutoff.text.utf8)
            while first + 1 < files.count {
                let head = files[first + 1].prefix(timestampPrefix.count + timestampLength)
                guard head.count == timestampPrefix.count + timestampLength, head.starts(with: timestampPrefix),
                      head.dropFirst(timestampPrefix.count).lexicographicallyPrecedes(cut)
                else { break }
                first += 1
            }
        }
        var output: [UInt8] = []
        var lastSeq: UInt64 = 0
        for contents in files[first...] {
            var start = 0
            while let newline = contents[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = contents[start..<newline]
                start = newline + 1
                guard line.count < readerChunk, let seq = recordSeq(line), seq > lastSeq else { continue }
                lastSeq = seq
                let ts = line.dropFirst(timestampPrefix.count).prefix(timestampLength)
                if let cutoff, ts.lexicographicallyPrecedes(cutoff.text.utf8) { continue }
                output += line
                output.append(UInt8(ascii: "\n"))
            }
        }
        return output
    }
}

// MARK: - Files

func fileName(_ firstSeq: UInt64) -> String {
    let number = String(firstSeq)
    return "readings-" + String(repeating: "0", count: 20 - number.count) + number + ".jsonl"
}

/// A directory of this process's own, emptied for every input.
struct Scratch {
    let path: String

    init() {
        let base = getenv("FUZZ_TMPDIR").map { String(cString: $0) } ?? (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
        path = base + "/tether-fuzz-readings-\(getpid())"
    }

    func fresh() -> String {
        remove()
        mkdir(path, 0o700)
        let directory = path + "/log"
        require(mkdir(directory, 0o700) == 0, "cannot create \(directory): \(String(cString: strerror(errno)))")
        return directory
    }

    func remove() {
        let directory = path + "/log"
        for name in listFiles(directory) { unlink(directory + "/" + name) }
        rmdir(directory)
        rmdir(path)
    }
}

let scratch = Scratch()

func listFiles(_ directory: String) -> [String] {
    guard let handle = opendir(directory) else { return [] }
    defer { closedir(handle) }
    var names: [String] = []
    while let entry = readdir(handle) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != ".", name != ".." { names.append(name) }
    }
    return names
}

func writeFile(_ path: String, _ bytes: [UInt8]) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    require(fd >= 0, "cannot create \(path)")
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    require(written == bytes.count, "short write to \(path)")
}

struct ReadError: Error {}

func readFile(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw ReadError() }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 << 10)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw ReadError() }
        if count == 0 { return bytes }
        bytes += chunk[..<count]
    }
}

// MARK: - Seeds

@main
enum Main {
    static func main() {
        writeSeedsIfAsked(seeds)
        // libFuzzer ends a campaign with exit(); a crash leaves the directory to look at.
        atexit { scratch.remove() }
        runLibFuzzer(testOneInput)
    }
}

/// Files as the daemon writes them, and as a crash or power loss leaves them.
func seeds() -> [(name: String, bytes: [UInt8])] {
    func record(_ seq: Int, _ hex: String = "0a0b0c", ms: Int = 345) -> [UInt8] {
        Array((#"{"ts":"2026-11-21T13:45:12.\#(ms)Z","seq":\#(seq),"device":"AA:BB:CC:DD:EE:FF","#
            + #""char":"6e400003-b5a3-f393-e0a9-e50e24dcca9e","source":"notify","hex":"\#(hex)"}"# + "\n").utf8)
    }
    func text(_ string: String) -> [UInt8] { Array(string.utf8) }
    let gap = text(#"{"ts":"2026-11-21T13:45:13.001Z","seq":4,"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":12}"# + "\n")
    let read = text(#"{"ts":"2026-11-21T13:45:14.500Z","seq":5,"device":"AA:BB:CC:DD:EE:FF","#
        + #""char":"6e400002-b5a3-f393-e0a9-e50e24dcca9e","source":"read","hex":""}"# + "\n")
    let intact = record(1) + record(2, ms: 346) + record(3, "00", ms: 347) + gap + read
    let torn = Array(record(6, ms: 900).prefix(57))
    let endOfOlderFile: [UInt8] = [0xff]
    func seqBytes(_ seq: UInt64) -> [UInt8] {
        var output = FuzzOutput()
        output.integer(seq)
        return output.bytes
    }
    let garbage = text("{\"hello\":1}\nnot json\n\u{0}\u{0}" + #"{"ts":"x","seq":9,"device":"d","source":"notify"}"# + "\n")
    let lastPossible = text(#"{"ts":"2026-11-21T13:45:12.345Z","seq":18446744073709551615,"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":0}"# + "\n")
    return [
        ("intact", [0] + intact),
        ("torn-last-line", [0] + intact + torn),
        ("missing-newline", [0] + intact + record(6).dropLast()),
        ("nul-tail-after-power-loss", [4, 4, 0] + intact),
        ("garbage-lines-at-the-end", [0] + intact + garbage),
        ("newest-file-empty-after-rotation", [2] + intact + endOfOlderFile),
        ("newest-file-torn-older-intact", [2 | 8] + intact + endOfOlderFile + torn),
        ("since-cutoff", [1 | 2 | 32] + seqBytes(2) + record(1) + endOfOlderFile + [1] + record(2, ms: 346) + record(3, ms: 347)),
        ("newest-file-named-1000", [1] + seqBytes(1000) + intact + torn),
        ("full-file-rotates-on-first-append", [1 | 8] + seqBytes(1) + (1...30).flatMap { record($0) }),
        ("gap-after-recovery", [16] + intact + torn),
        ("seq-exhausted", [1] + seqBytes(UInt64.max - 1) + record(1) + lastPossible),
    ]
}
