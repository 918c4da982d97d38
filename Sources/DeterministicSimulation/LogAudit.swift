import Foundation
import Readings

/// Reads the readings log back from disk and checks it against what the
/// dongle delivered (`Invariant.readingsExactlyOnce`): each record readable,
/// seqs strictly increasing, the dongle's sequence numbers strictly
/// increasing, every one missing excused or counted by the gap record in
/// front of where it is missing, and none forged
/// (`Invariant.believesOnlyBluetoothd`).
///
/// Incremental at each start of Tether (from where the last look stopped, so
/// a seed's log is read about once), whole at the end of the run.
struct LogAudit {
    /// Ids lost with a reason the invariant accepts (a kill, a stop while
    /// the disk refused them: `InvariantChecker.processKilled`).
    private(set) var excused = Set<UInt64>()

    private struct Cursor {
        var file: String?
        var offset = 0
        var lastSeq: UInt64 = 0
        var lastID: UInt64 = 0
        var gapCounted = 0
        /// Readings the gap records since the last reading say were dropped.
        var gapCredit = 0
        var records = 0
    }

    private var cursor = Cursor()

    mutating func excuse(_ id: UInt64) { excused.insert(id) }

    /// The records written since the last look.
    mutating func check(_ simulation: Simulation) {
        var cursor = self.cursor
        scan(simulation, &cursor)
        self.cursor = cursor
    }

    /// The whole log, from its first file; then nothing may be missing.
    mutating func finalCheck(_ simulation: Simulation) {
        var cursor = Cursor()
        scan(simulation, &cursor)
        guard simulation.violation == nil else { return }
        if cursor.lastID < simulation.delivered {
            for id in (cursor.lastID + 1)...simulation.delivered where !excused.contains(id) {
                return simulation.violated(.readingsExactlyOnce, "reading \(id) was delivered and is not in the log (the log ends at reading \(cursor.lastID))")
            }
        }
        simulation.checker.count(.readingsExactlyOnce)
    }

    private func scan(_ simulation: Simulation, _ cursor: inout Cursor) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: simulation.directory)) ?? [])
            .filter { $0.hasPrefix("readings-") && $0.hasSuffix(".jsonl") }
            .sorted()
        for name in names {
            var start = 0
            if let current = cursor.file {
                if name < current { continue }
                if name == current { start = cursor.offset }
            }
            guard let data = FileManager.default.contents(atPath: simulation.directory + "/" + name) else { continue }
            let bytes = [UInt8](data)
            if name == cursor.file, bytes.count < start {
                return simulation.violated(.readingsExactlyOnce, "\(name) shrank below what was checked (\(bytes.count) < \(start) bytes)")
            }
            var lineStart = start
            while lineStart < bytes.count {
                guard let newline = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) else {
                    return simulation.violated(.readingsExactlyOnce, "\(name) ends in a torn record at byte \(lineStart) after recovery")
                }
                guard let record = LogLine(bytes[lineStart..<newline]) else {
                    let text = String(decoding: bytes[lineStart..<min(newline, lineStart + 160)], as: UTF8.self)
                    return simulation.violated(.readingsExactlyOnce, "\(name) byte \(lineStart): an unreadable line: \(text)")
                }
                guard record.seq > cursor.lastSeq else {
                    return simulation.violated(.readingsExactlyOnce, "seq \(record.seq) after seq \(cursor.lastSeq) (\(name))")
                }
                cursor.lastSeq = record.seq
                switch record.content {
                case .gap(let count):
                    cursor.gapCounted += count
                    cursor.gapCredit += count
                case .reading(let id):
                    simulation.checker.count(.readingsDatable)
                    guard let dating = record.dating else {
                        return simulation.violated(.readingsDatable, "reading \(id) (seq \(record.seq)) has no ts and boot_ms to date it by")
                    }
                    let bootStart = dating.ts - Int64(clamping: dating.sinceBoot)
                    if (abs(bootStart - Simulation.bootWallMilliseconds) <= 1) != dating.synced {
                        return simulation.violated(
                            .readingsDatable,
                            "reading \(id) (seq \(record.seq)): ts − boot_ms is \(bootStart - Simulation.bootWallMilliseconds) ms from the boot's start and clock_synced is \(dating.synced)")
                    }
                    simulation.checker.count(.believesOnlyBluetoothd)
                    if id >= UInt64(Simulation.forgedSequenceBase) {
                        return simulation.violated(.believesOnlyBluetoothd, "a forged notification (\(id)) is in the log (seq \(record.seq))")
                    }
                    guard id > cursor.lastID else {
                        return simulation.violated(.readingsExactlyOnce, "reading \(id) (seq \(record.seq)) is in the log again or out of order, after reading \(cursor.lastID)")
                    }
                    var unexcused = 0, excusedHere = 0
                    if id > cursor.lastID + 1 {
                        for missing in (cursor.lastID + 1)..<id {
                            if excused.contains(missing) { excusedHere += 1 } else { unexcused += 1 }
                        }
                    }
                    // Readings the recorder dropped from a full backlog are
                    // missing right where its gap record says how many.
                    if unexcused > cursor.gapCredit || cursor.gapCredit > unexcused + excusedHere {
                        return simulation.violated(
                            .readingsExactlyOnce,
                            unexcused > cursor.gapCredit
                                ? "\(unexcused - cursor.gapCredit) readings before \(id) are missing from the log (found \(cursor.lastID), then \(id); gap records there: \(cursor.gapCredit))"
                                : "gap records before reading \(id) count \(cursor.gapCredit) dropped readings; \(unexcused + excusedHere) are missing there")
                    }
                    cursor.gapCredit = 0
                    cursor.lastID = id
                }
                cursor.records += 1
                lineStart = newline + 1
            }
            cursor.file = name
            cursor.offset = bytes.count
        }
        simulation.checker.count(.readingsExactlyOnce)
    }
}

/// One record of the log, parsed just enough: its seq and either the
/// reading's id (the dongle's sequence number, from its payload) or a gap's count.
/// (JSONDecoder would cost more than the whole simulation.)
struct LogLine {
    enum Content { case reading(UInt64), gap(Int) }
    var seq: UInt64
    var content: Content
    /// A reading's `ts` (ms since 1970), `boot_ms` and `clock_synced`.
    var dating: (ts: Int64, sinceBoot: UInt64, synced: Bool)?

    init?(_ line: ArraySlice<UInt8>) {
        guard line.first == UInt8(ascii: "{"), line.last == UInt8(ascii: "}"),
              let seq = Self.number(after: #""seq":"#, in: line)
        else { return nil }
        self.seq = seq
        if Self.find(#""source":"gap""#, in: line) != nil {
            guard let count = Self.number(after: #""count":"#, in: line) else { return nil }
            content = .gap(Int(count))
        } else {
            // The dongle's payload: its sequence number, UInt32 little-endian,
            // then 4 bytes of telemetry (`SimulatedDongle.nextNotification`).
            guard let start = Self.find(#""hex":""#, in: line), line.endIndex - start >= 18 else { return nil }
            var id: UInt64 = 0
            for byte in 0..<4 {
                guard let high = Self.hexDigit(line[start + 2 * byte]), let low = Self.hexDigit(line[start + 2 * byte + 1]) else {
                    return nil
                }
                id |= UInt64(high << 4 | low) << (8 * UInt64(byte))
            }
            guard line[start + 16] == UInt8(ascii: "\"") else { return nil }
            content = .reading(id)
            let tsStart = line.startIndex + 7  // {"ts":"
            if line.count > 31, let ts = UTCTimestamp.milliseconds(String(decoding: line[tsStart..<tsStart + 24], as: UTF8.self)),
               let sinceBoot = Self.number(after: #""boot_ms":"#, in: line[(start + 17)...])
            {
                dating = (ts, sinceBoot, Self.find(#""clock_synced":true"#, in: line[(start + 17)...]) != nil)
            }
        }
    }

    /// The index just past `pattern` in `line`.
    private static func find(_ pattern: StaticString, in line: ArraySlice<UInt8>) -> Int? {
        let needle = UnsafeBufferPointer(start: pattern.utf8Start, count: pattern.utf8CodeUnitCount)
        guard line.count >= needle.count else { return nil }
        var index = line.startIndex
        let last = line.endIndex - needle.count
        outer: while index <= last {
            for offset in 0..<needle.count where line[index + offset] != needle[offset] {
                index += 1
                continue outer
            }
            return index + needle.count
        }
        return nil
    }

    private static func number(after pattern: StaticString, in line: ArraySlice<UInt8>) -> UInt64? {
        guard var index = find(pattern, in: line) else { return nil }
        var value: UInt64 = 0
        var digits = 0
        while index < line.endIndex, line[index] >= UInt8(ascii: "0"), line[index] <= UInt8(ascii: "9") {
            value = value &* 10 &+ UInt64(line[index] - UInt8(ascii: "0"))
            digits += 1
            index += 1
        }
        return digits > 0 ? value : nil
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
