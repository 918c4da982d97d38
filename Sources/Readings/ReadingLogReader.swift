#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import FoundationEssentials

/// Reads a readings directory the way `tether readings` prints it: every record
/// line, unchanged, oldest first, while the daemon may be writing.
///
/// Streams: files are read in 64 KiB chunks and handed on in batches of whole
/// lines, so memory use does not depend on file sizes. Only complete lines are
/// delivered; a last line without its newline (the daemon may be writing it) is
/// left where it is and picked up by a later `readAvailable` once it is whole.
///
/// Each call to `readAvailable` continues where the previous one stopped: the
/// rest of the current file, then any newer files. That is all following needs
/// (see `ReadingLogFollower`, which calls it when inotify says something changed).
///
/// Lines are checked cheaply, without JSON decoding: a record starts with
/// `{"ts":"<24-byte UTC timestamp>","seq":<digits>,` and ends with `}`. Anything
/// else (a fragment, NUL bytes left by a crash) is skipped. Records are delivered
/// once each in `seq` order: a record whose seq is not above the last one seen
/// (a write the daemon rolled back and repeated) is skipped.
///
/// Not thread-safe: one owner.
public final class ReadingLogReader {
    /// A batch of complete lines, each ending in "\n", valid only during the call.
    /// Throwing stops the read and is rethrown by `readAvailable`.
    public typealias Sink = (UnsafeRawBufferPointer) throws -> Void

    static let chunkSize = 64 << 10
    /// The 24 bytes of "2026-11-21T13:45:12.345Z".
    static let timestampLength = 24
    private static let timestampPrefix = Array(#"{"ts":""#.utf8)
    private static let seqPrefix = Array(#"","seq":"#.utf8)

    public let directory: String
    /// Records with a `ts` before this (a fixed-width UTC timestamp) are skipped.
    let cutoff: [UInt8]?

    private struct OpenFile {
        var path: String
        var firstSeq: UInt64
        var fd: Int32
        /// Just past the last complete line consumed.
        var offset: Int64
        var device: UInt64
        var inode: UInt64
    }

    private var current: OpenFile?
    /// The file `syncRead` last made durable (its directory entry too).
    private var syncedFile: (device: UInt64, inode: UInt64)?
    /// The fsync(2) `syncRead` uses; tests replace it to see what is synced.
    @_spi(FaultInjection) public var syncCall: @Sendable (_ fd: Int32, _ path: String) throws -> Void = { fd, path in
        try LogFileSystem.sync(fd, path: path)
    }
    private var started = false
    /// The seq of the last record consumed (delivered or below the cutoff).
    private var lastSeq: UInt64 = 0
    private let afterSeq: UInt64
    /// Inside a "line" longer than a chunk: no record is that long, so it is
    /// garbage and skipped up to its newline.
    private var discarding = false
    private var chunk: [UInt8]
    private var batch: [UInt8] = []

    /// Opens `directory` for reading. `since`: deliver only records whose `ts` is at
    /// or after it (compared at the log's millisecond precision).
    ///
    /// Throws a `ReadingLogError` if the directory cannot be read.
    ///
    /// `afterSeq`: deliver only records with a greater `seq` (a forwarder's
    /// cursor); files that end before it are not read.
    public init(directory: String, since: Date? = nil, afterSeq: UInt64 = 0) throws {
        self.directory = directory
        lastSeq = afterSeq
        self.afterSeq = afterSeq
        cutoff = since.map { date in
            var bytes: [UInt8] = []
            UTCTimestamp.append(date, to: &bytes)
            return bytes
        }
        chunk = [UInt8](repeating: 0, count: Self.chunkSize)
        guard let handle = opendir(directory) else { throw LogFileSystem.failure("opendir", directory) }
        closedir(handle)
    }

    deinit {
        if let current { LogFileSystem.closeFile(current.fd) }
    }

    /// Delivers every complete record not delivered yet: on the first call from the
    /// oldest file that can hold records at or after `since`, later from where the
    /// previous call stopped.
    ///
    /// - Parameter listDirectory: whether to look for new files. `false` only reads
    ///   on in the current file (what an inotify `IN_MODIFY` calls for); the first
    ///   call, and any call without a current file, always lists.
    ///
    /// - Parameter limit: stop once about this many bytes of records have been
    ///   delivered in this call (a chunk more at most), so that a consumer that
    ///   holds what it gets (a forwarder with a large backlog) bounds its
    ///   memory. Returns true if it stopped there: call again for the rest.
    @discardableResult
    public func readAvailable(listDirectory: Bool = true, limit: Int = .max, to sink: Sink) throws -> Bool {
        remaining = limit
        defer { remaining = .max }
        guard listDirectory || current == nil || !started else {
            try drainCurrent(to: sink)
            return remaining <= 0
        }
        // List first, then finish the current file: a file in the listing was created
        // after the daemon's last write to every older file, so each older file is
        // complete once drained after the listing.
        let files = try LogFileSystem.listLogFiles(in: directory)
        let next: ArraySlice<LogFileSystem.Entry>
        if !started {
            started = true
            next = files[firstFileIndex(files)...]
        } else if let file = current {
            if let replacement = files.first(where: { $0.firstSeq == file.firstSeq }), isReplaced(file, by: replacement.path) {
                // Same name, new file: the daemon rolled back a rotation and redid it.
                // Read it from the start; seqs already delivered are skipped.
                next = files[(files.firstIndex(where: { $0.firstSeq >= file.firstSeq }) ?? files.endIndex)...]
            } else {
                next = files[(files.firstIndex(where: { $0.firstSeq > file.firstSeq }) ?? files.endIndex)...]
            }
        } else {
            next = files[...]
        }
        try drainCurrent(to: sink)
        for entry in next {
            if remaining <= 0 { return true }
            guard let file = try open(entry) else { continue }  // deleted by retention meanwhile
            if let old = current { LogFileSystem.closeFile(old.fd) }
            current = file
            discarding = false
            try drainCurrent(to: sink)
        }
        return remaining <= 0
    }

    /// Makes every record delivered so far durable, whatever the writer's
    /// own flush interval: fsyncs the file being read and, when it is not the
    /// one synced last, the directory (a file rotation creates may not be
    /// durable yet). Records of older files are covered too: once the newer
    /// file is on disk, recovery continues after its name's seq at least.
    ///
    /// A consumer that records progress durably (the forwarder's cursor)
    /// calls this first: after a power cut its progress must not be past the
    /// log's end, or the daemon hands those seqs out again to new readings
    /// and the consumer skips them.
    public func syncRead() throws {
        guard let file = current else { return }
        try syncCall(file.fd, file.path)
        if syncedFile?.device != file.device || syncedFile?.inode != file.inode {
            let fd = try LogFileSystem.openFile(directory, flags: O_RDONLY | O_DIRECTORY)
            defer { LogFileSystem.closeFile(fd) }
            try syncCall(fd, directory)
            syncedFile = (file.device, file.inode)
        }
    }

    /// Bytes of records this `readAvailable` call may still deliver.
    private var remaining = Int.max

    // MARK: - Files

    /// Skips whole files when `since` is set: a file whose successor's first record
    /// is already older than the cutoff holds nothing to deliver (clock steps
    /// backwards aside). Reads only the first bytes of each successor.
    private func firstFileIndex(_ files: [LogFileSystem.Entry]) -> Int {
        guard !files.isEmpty else { return 0 }
        var index = 0
        // Files are named by their first seq: the one holding afterSeq + 1 (or
        // the first after it, when retention deleted that one) is the start.
        while afterSeq > 0, index + 1 < files.count, files[index + 1].firstSeq <= afterSeq + 1 { index += 1 }
        guard let cutoff else { return index }
        while index + 1 < files.count {
            guard let timestamp = firstTimestamp(of: files[index + 1].path),
                  timestamp.lexicographicallyPrecedes(cutoff)
            else { break }
            index += 1
        }
        return index
    }

    /// The `ts` bytes of a file's first record, or nil if it has none (yet) or cannot be read.
    private func firstTimestamp(of path: String) -> [UInt8]? {
        guard let fd = try? LogFileSystem.openFile(path, flags: O_RDONLY) else { return nil }
        defer { LogFileSystem.closeFile(fd) }
        let length = Self.timestampPrefix.count + Self.timestampLength
        guard let head = try? LogFileSystem.read(fd, offset: 0, count: length, path: path),
              head.count == length, head.starts(with: Self.timestampPrefix)
        else { return nil }
        return Array(head[Self.timestampPrefix.count...])
    }

    /// Opens a listed file, or returns nil if it is gone already.
    private func open(_ entry: LogFileSystem.Entry) throws -> OpenFile? {
        let fd: Int32
        do {
            fd = try LogFileSystem.openFile(entry.path, flags: O_RDONLY)
        } catch let error as ReadingLogError where error.code == ENOENT {
            return nil
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let error = LogFileSystem.failure("fstat", entry.path)
            LogFileSystem.closeFile(fd)
            throw error
        }
        return OpenFile(
            path: entry.path, firstSeq: entry.firstSeq, fd: fd, offset: 0,
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino)
        )
    }

    /// Whether `path` now names another file than the one `file` has open.
    private func isReplaced(_ file: OpenFile, by path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        return UInt64(info.st_dev) != file.device || UInt64(info.st_ino) != file.inode
    }

    // MARK: - Lines

    private func drainCurrent(to sink: Sink) throws {
        guard var file = current else { return }
        defer { current = file }
        try drain(&file, to: sink)
    }

    /// Delivers the complete lines from `file.offset` to the end of the file.
    private func drain(_ file: inout OpenFile, to sink: Sink) throws {
        // Cut back (a rolled-back write, or recovery of a torn tail): go on from the new end.
        let size = try LogFileSystem.size(of: file.fd, path: file.path)
        if size < file.offset { file.offset = size }
        while true {
            let count = try readChunk(file.fd, at: file.offset, path: file.path)
            guard count > 0 else { return }
            let consumed = try chunk.withUnsafeBytes { buffer in
                try deliverLines(UnsafeRawBufferPointer(rebasing: buffer[..<count]), to: sink)
            }
            if consumed == 0 {
                guard count == chunk.count else { return }  // a line still being written
                discarding = true  // a chunk without a newline: not a record
                file.offset += Int64(count)
            } else {
                file.offset += Int64(consumed)
                remaining -= consumed
                if remaining <= 0 { return }
            }
            if count < chunk.count { return }
        }
    }

    private func readChunk(_ fd: Int32, at offset: Int64, path: String) throws -> Int {
        try chunk.withUnsafeMutableBytes { buffer in
            var done = 0
            while done < buffer.count {
                let result = pread(fd, buffer.baseAddress?.advanced(by: done), buffer.count - done, off_t(offset) + off_t(done))
                if result > 0 {
                    done += result
                } else if result == 0 {
                    break
                } else if errno != EINTR {
                    throw LogFileSystem.failure("read", path)
                }
            }
            return done
        }
    }

    /// Delivers the records among the complete lines of `bytes` as one batch and
    /// returns how many bytes those lines take (up to and including the last newline).
    private func deliverLines(_ bytes: UnsafeRawBufferPointer, to sink: Sink) throws -> Int {
        batch.removeAll(keepingCapacity: true)
        var start = 0
        while start < bytes.count, let newline = Self.newline(in: bytes, from: start) {
            let line = UnsafeRawBufferPointer(rebasing: bytes[start..<newline])
            if discarding {
                discarding = false
            } else if let seq = Self.seq(ofRecord: line), seq > lastSeq {
                lastSeq = seq
                if isAtOrAfterCutoff(line) {
                    batch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start...newline]))
                }
            }
            start = newline + 1
        }
        if !batch.isEmpty {
            try batch.withUnsafeBytes { try sink($0) }
        }
        return start
    }

    private static func newline(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = bytes.baseAddress,
              let found = memchr(base + start, Int32(UInt8(ascii: "\n")), bytes.count - start)
        else { return nil }
        return UnsafeRawPointer(found) - base
    }

    /// The seq of a line shaped like a record, or nil.
    /// The `seq` of a record line (without its newline), or nil if the line
    /// is not a record.
    public static func seq(ofRecord line: UnsafeRawBufferPointer) -> UInt64? {
        let seqStart = timestampPrefix.count + timestampLength + seqPrefix.count
        guard line.count > seqStart + 2, line[line.count - 1] == UInt8(ascii: "}"),
              line.starts(with: timestampPrefix),
              line[timestampPrefix.count + timestampLength - 1] == UInt8(ascii: "Z"),
              UnsafeRawBufferPointer(rebasing: line[(timestampPrefix.count + timestampLength)...]).starts(with: seqPrefix)
        else { return nil }
        var seq: UInt64 = 0
        var index = seqStart
        while index < line.count, line[index] >= UInt8(ascii: "0"), line[index] <= UInt8(ascii: "9") {
            let (times10, overflow1) = seq.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(line[index] - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { return nil }
            seq = sum
            index += 1
        }
        guard index > seqStart, index < line.count, line[index] == UInt8(ascii: ",") else { return nil }
        return seq
    }

    /// Whether a record line's `ts` is at or after the cutoff (fixed width: compare bytes).
    private func isAtOrAfterCutoff(_ line: UnsafeRawBufferPointer) -> Bool {
        guard let cutoff else { return true }
        let start = Self.timestampPrefix.count
        return !line[start..<(start + Self.timestampLength)].lexicographicallyPrecedes(cutoff)
    }
}

@available(*, unavailable, message: "ReadingLogReader has a single owner")
extension ReadingLogReader: Sendable {}
