#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import FoundationEssentials

/// Cuts a torn tail off a readings file after a crash or power loss.
///
/// Appends are single write(2)s of whole lines, so damage is confined to the end:
/// a partial line, or NUL bytes / garbage where the filesystem extended the file
/// but the data never reached the disk. We scan backwards for the last line that
/// is a well-formed record and truncate right after it.
enum LogTailRecovery {
    struct Outcome {
        /// The last good record, nil if the file had none (it is then emptied).
        var lastRecord: ReadingRecord?
        var truncatedBytes: Int64
    }

    /// Our lines are a few hundred bytes; a longer "line" is garbage and is not
    /// worth reading into memory to find that out.
    static let maximumLineLength: Int64 = 64 << 10
    private static let chunkSize: Int64 = 64 << 10

    static func recover(path: String) throws -> Outcome {
        // O_APPEND so the newline we may add lands at the (new) end.
        let fd = try LogFileSystem.openFile(path, flags: O_RDWR | O_APPEND)
        defer { close(fd) }
        let size = try LogFileSystem.size(of: fd, path: path)
        let decoder = JSONDecoder()
        guard let found = try lastRecord(fd: fd, size: size, path: path, decoder: decoder) else {
            if size > 0 {
                try LogFileSystem.truncate(fd, to: 0, path: path)
                try LogFileSystem.sync(fd, path: path)
            }
            return Outcome(lastRecord: nil, truncatedBytes: size)
        }
        #if !DST_BUG_TORN_TAIL_KEPT  // planted bug (make dst-selftest): the torn tail stays
        if found.end < size {
            try LogFileSystem.truncate(fd, to: found.end, path: path)
        }
        #endif
        if found.needsNewline {
            // The record is whole but its newline was lost; restore it rather than drop the record.
            try LogFileSystem.writeAll(fd, [UInt8(ascii: "\n")], path: path, using: LogFileSystem.systemWrite)
        }
        if found.end < size || found.needsNewline {
            try LogFileSystem.sync(fd, path: path)
        }
        return Outcome(lastRecord: found.record, truncatedBytes: size - found.end)
    }

    /// The last well-formed record and the offset just past it (past its newline if it has one).
    private static func lastRecord(
        fd: Int32, size: Int64, path: String, decoder: JSONDecoder
    ) throws -> (record: ReadingRecord, end: Int64, needsNewline: Bool)? {
        var segmentEnd = size  // exclusive end of the candidate line's content
        var terminated = false  // whether a newline sits at segmentEnd
        var newlines = NewlineScanner(fd: fd, path: path)
        while true {
            let newline = try newlines.lastNewline(before: segmentEnd)
            let start = newline + 1
            let length = segmentEnd - start
            if length > 0, length <= maximumLineLength {
                let line = try LogFileSystem.read(fd, offset: start, count: Int(length), path: path)
                if let record = ReadingRecord.decode(line: line, using: decoder) {
                    return (record, terminated ? segmentEnd + 1 : segmentEnd, !terminated)
                }
            }
            guard newline >= 0 else { return nil }
            segmentEnd = newline
            terminated = true
        }
    }

    /// Finds newlines from the end of a file backwards, reading each byte once
    /// however many lines there are: a tail of many short invalid lines (say,
    /// newlines with nothing between them) must not cost a chunk-sized read per line.
    private struct NewlineScanner {
        let fd: Int32
        let path: String
        /// The bytes of the file from `chunkStart`, read last.
        private var chunk: [UInt8] = []
        private var chunkStart: Int64 = 0

        init(fd: Int32, path: String) {
            self.fd = fd
            self.path = path
        }

        /// Offset of the last "\n" before `end`, or -1. `end` must not grow between calls.
        mutating func lastNewline(before end: Int64) throws -> Int64 {
            var position = end
            while position > 0 {
                if position <= chunkStart || position > chunkStart + Int64(chunk.count) {
                    let start = max(0, position - chunkSize)
                    chunk = try LogFileSystem.read(fd, offset: start, count: Int(position - start), path: path)
                    chunkStart = start
                    // The file is locked and was measured: a short read means it shrank under us.
                    guard chunkStart + Int64(chunk.count) == position else { throw LogFileSystem.failure("read", path, EIO) }
                }
                if let index = chunk[..<Int(position - chunkStart)].lastIndex(of: UInt8(ascii: "\n")) {
                    return chunkStart + Int64(index)
                }
                position = chunkStart
            }
            return -1
        }
    }
}
