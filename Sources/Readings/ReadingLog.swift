#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import FoundationEssentials

/// The on-disk readings log: JSON Lines files in one directory, rotated by size,
/// oldest deleted beyond a retention budget, recovered after a crash.
///
/// Not thread-safe: exactly one owner (the recorder's queue) uses it.
public final class ReadingLog {
    /// What opening the log found and repaired.
    public struct Recovery: Sendable, Equatable, CustomStringConvertible {
        /// The newest file, which was checked (and possibly truncated); nil if there were no files.
        public var file: String?
        /// Bytes cut off the end of files because they did not hold whole, valid records.
        public var truncatedBytes: Int
        /// The seq the log continues after.
        public var lastSeq: UInt64

        public var description: String {
            guard let file else { return "no existing readings; starting at seq 1" }
            let repair = truncatedBytes > 0 ? "truncated \(truncatedBytes) torn bytes from \(file)" : "\(file) was intact"
            return "\(repair); continuing after seq \(lastSeq)"
        }
    }

    /// An entry to write: a reading, or a note that `count` readings were lost.
    enum Entry {
        case reading(Reading)
        case gap(count: Int, device: String, at: Date)
    }

    private struct OpenFile {
        var path: String
        var fd: Int32
        var size: Int64
    }

    public let directory: String
    public let recovery: Recovery
    public private(set) var lastSeq: UInt64

    private let rotateSize: Int64
    private let retainSize: Int64
    /// The file appended to; nil until the first append into an empty directory.
    private var current: OpenFile?
    /// Finished files, oldest first, for retention.
    private var finished: [(path: String, size: Int64)]
    /// Files rotated away from whose data still awaits fsync; closed by `sync()`.
    private var unsyncedFinished: [OpenFile] = []
    /// An fsync failure from `retire`, reported by the next `sync()`.
    private var deferredSyncError: Error?
    private var directoryNeedsSync = false
    /// A write failed and was rolled back; its ftruncate may have failed too.
    private var rollbackPending = false
    private var isClosed = false
    /// Holds an exclusive flock on `DIR/.lock` while the log is open: two
    /// writers would hand out the same seqs.
    private var lockFD: Int32
    /// Files removed while being appended to and written back (`sync()`).
    public private(set) var restoredFiles: [String] = []

    /// The write(2) used for appends; tests and the deterministic simulation
    /// replace it to simulate a full or failing disk and short writes.
    @_spi(FaultInjection) public var writeCall: @Sendable (_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int =
        LogFileSystem.systemWrite
    /// The ftruncate(2) a rollback uses; tests replace it to make the rollback
    /// fail, the simulation to leave a torn tail (a process killed mid-write).
    @_spi(FaultInjection) public var truncateCall: @Sendable (_ fd: Int32, _ size: Int64) -> Int32 =
        LogFileSystem.systemTruncate
    /// The fsync(2) of a log file (`sync()`, a rotation); tests replace it to
    /// see when the data is made durable.
    @_spi(FaultInjection) public var syncCall: @Sendable (_ fd: Int32, _ path: String) throws -> Void = { fd, path in
        try LogFileSystem.sync(fd, path: path)
    }

    /// Opens (creating with mode 0750 if needed) and recovers the log in `directory`.
    public init(directory: String, rotateSize: Int64, retainSize: Int64) throws {
        self.directory = directory
        self.rotateSize = max(rotateSize, 1)
        self.retainSize = retainSize
        try LogFileSystem.makeDirectories(directory, mode: 0o750)
        let lock = try Self.lockDirectory(directory)
        lockFD = lock
        // Until every property is set a throw runs no deinit: release the lock here.
        do {

            var files = try LogFileSystem.listLogFiles(in: directory)
            var truncated: Int64 = 0
            var lastSeq: UInt64 = 0
            // The newest file's name says which seq it started at: seqs below it were
            // used even if retention deleted or damage destroyed every record of them.
            if let newest = files.last, newest.firstSeq > 0 { lastSeq = newest.firstSeq - 1 }
            for (index, file) in files.enumerated().reversed() {
                let outcome = try LogTailRecovery.recover(path: file.path)
                truncated += outcome.truncatedBytes
                if let record = outcome.lastRecord {
                    lastSeq = max(lastSeq, record.seq)
                    // A newest file that keeps records has used the seq its name starts
                    // at, whatever they say (a file edited or restored by hand): the next
                    // rotation must not create, and truncate, a file of the same name.
                    if index == files.count - 1 { lastSeq = max(lastSeq, file.firstSeq) }
                    break
                }
                // A file left with no records: the newest stays as the file to append to,
                // an older one is just clutter.
                if index != files.count - 1 {
                    try LogFileSystem.remove(file.path)
                    files.remove(at: index)
                }
            }
            #if DST_BUG_SEQ_REUSED_AFTER_RESTART
            // Planted bug (make dst-selftest): the newest record's seq is handed out again.
            self.lastSeq = lastSeq > 0 ? lastSeq - 1 : 0
            #else
            self.lastSeq = lastSeq
            #endif
            self.recovery = Recovery(file: files.last?.path, truncatedBytes: Int(truncated), lastSeq: lastSeq)

            var finished: [(path: String, size: Int64)] = []
            for file in files.dropLast() {
                var info = stat()
                finished.append((file.path, stat(file.path, &info) == 0 ? Int64(info.st_size) : 0))
            }
            self.finished = finished
            if let newest = files.last {
                let fd = try LogFileSystem.openFile(newest.path, flags: O_RDWR | O_APPEND)
                do {
                    current = OpenFile(path: newest.path, fd: fd, size: try LogFileSystem.size(of: fd, path: newest.path))
                } catch {
                    LogFileSystem.closeFile(fd)
                    throw error
                }
            }
        } catch {
            LogFileSystem.closeFile(lock)
            throw error
        }
        applyRetention()
    }

    deinit {
        close()
    }

    /// Appends `readings` with consecutive seqs and returns the seqs used.
    ///
    /// All-or-nothing: on failure any partial write is rolled back and no seq is
    /// consumed, so the caller can retry the same readings later without leaving a
    /// hole or a duplicate in the seq sequence.
    @discardableResult
    public func append(_ readings: some Collection<Reading>) throws -> ClosedRange<UInt64>? {
        try write(readings.map { .reading($0) })
    }

    /// Records that `count` readings were lost (dropped from an overflowing backlog).
    public func appendGap(count: Int, device: String, at date: Date) throws {
        try write([.gap(count: count, device: device, at: date)])
    }

    /// Writes `entries` as one transaction: one write(2) per file touched.
    @discardableResult
    func write(_ entries: [Entry]) throws -> ClosedRange<UInt64>? {
        guard !isClosed else { throw LogFileSystem.failure("append", directory, EBADF) }
        guard !entries.isEmpty else { return nil }
        // Only reachable with a doctored file name or record, but must not trap.
        guard UInt64(entries.count) <= UInt64.max - lastSeq else { throw LogFileSystem.failure("append", directory, EOVERFLOW) }

        // A rollback whose ftruncate failed (EIO, EROFS) left bytes past what
        // was counted as written: cut them off before appending, or the retry
        // would write those readings twice and glue a line onto a fragment.
        // Only after a failed write: an fstat per batch is a syscall per
        // wake-up on the daemon's hot path.
        if rollbackPending {
            // A rotation's new file cannot be created in a directory that was
            // removed: make it again (and write back the file that went with it).
            try restoreIfRemoved()
            if let file = current, try LogFileSystem.size(of: file.fd, path: file.path) != file.size {
                try LogFileSystem.truncate(file.fd, to: file.size, path: file.path)
            }
            rollbackPending = false
        }

        let segments = plan(entries)
        let rollbackSize = current?.size
        var created: [OpenFile] = []
        var bytesToCurrent = 0
        do {
            for segment in segments {
                if segment.toCurrent, let file = current {
                    try LogFileSystem.writeAll(file.fd, segment.bytes, path: file.path, using: writeCall)
                    bytesToCurrent = segment.bytes.count
                } else {
                    let path = directory + "/" + LogFileName.name(firstSeq: segment.firstSeq)
                    let fd = try LogFileSystem.openFile(path, flags: O_RDWR | O_CREAT | O_TRUNC | O_APPEND)
                    created.append(OpenFile(path: path, fd: fd, size: Int64(segment.bytes.count)))
                    try LogFileSystem.writeAll(fd, segment.bytes, path: path, using: writeCall)
                }
            }
        } catch {
            #if !DST_BUG_WRITE_NOT_ROLLED_BACK  // planted bug (make dst-selftest): a failed write's prefix stays
            rollBack(currentSize: rollbackSize, created: created)
            #endif
            throw error
        }

        let firstSeq = lastSeq + 1
        lastSeq += UInt64(entries.count)
        current?.size += Int64(bytesToCurrent)
        if let newest = created.popLast() {
            if let old = current { retire(old) }
            created.forEach(retire)
            current = newest
            directoryNeedsSync = true
            applyRetention()
        }
        return firstSeq...lastSeq
    }

    /// fsyncs everything written so far, and the directory if files were created or deleted.
    /// The file appended to, if someone removed it (or its directory), is
    /// written back first (`restoredFiles`).
    public func sync() throws {
        var firstError = deferredSyncError
        deferredSyncError = nil
        do { try restoreIfRemoved() } catch { firstError = firstError ?? error }
        for file in unsyncedFinished {
            do { try syncCall(file.fd, file.path) } catch { firstError = firstError ?? error }
            LogFileSystem.closeFile(file.fd)
        }
        unsyncedFinished = []
        if let file = current {
            do { try syncCall(file.fd, file.path) } catch { firstError = firstError ?? error }
        }
        if directoryNeedsSync {
            do {
                try LogFileSystem.syncDirectory(directory)
                directoryNeedsSync = false
            } catch {
                firstError = firstError ?? error
            }
        }
        if let firstError { throw firstError }
    }

    /// The file appended to was removed (`rm`, a clean-up job, the whole
    /// directory): its records would live on only in a file nobody can open,
    /// lost at the next rotation or exit. They are copied, from its still
    /// open descriptor, to a new file of the same name (the directory and its
    /// lock made again if they went), which takes its place. One fstat per
    /// sync, not per append: syncs come once per flush interval.
    private func restoreIfRemoved() throws {
        guard let file = current, try LogFileSystem.linkCount(of: file.fd, path: file.path) == 0 else { return }
        try LogFileSystem.makeDirectories(directory, mode: 0o750)
        if try LogFileSystem.linkCount(of: lockFD, path: directory + "/.lock") == 0 {
            let lock = try Self.lockDirectory(directory)
            LogFileSystem.closeFile(lockFD)
            lockFD = lock
        }
        let fd = try LogFileSystem.openFile(file.path, flags: O_RDWR | O_CREAT | O_TRUNC | O_APPEND)
        do {
            try LogFileSystem.copy(file.size, from: file.fd, to: fd, path: file.path)
        } catch {
            LogFileSystem.closeFile(fd)
            try? LogFileSystem.remove(file.path)
            throw error
        }
        LogFileSystem.closeFile(file.fd)
        current = OpenFile(path: file.path, fd: fd, size: file.size)
        directoryNeedsSync = true
        // Finished files that went with it are forgotten: retention counts
        // what is there.
        finished.removeAll { access($0.path, F_OK) != 0 }
        restoredFiles.append(file.path)
    }

    /// Closes all files without syncing (call `sync()` first to make data durable).
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        for file in unsyncedFinished { LogFileSystem.closeFile(file.fd) }
        unsyncedFinished = []
        if let file = current { LogFileSystem.closeFile(file.fd) }
        current = nil
        LogFileSystem.closeFile(lockFD)  // releases the flock
    }

    /// Takes the directory's writer lock, or says who has it.
    private static func lockDirectory(_ directory: String) throws -> Int32 {
        let path = directory + "/.lock"
        let fd = try LogFileSystem.openFile(path, flags: O_RDWR | O_CREAT)
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            LogFileSystem.closeFile(fd)
            throw ReadingLogError(
                operation: code == EWOULDBLOCK ? "lock (another tether is writing here)" : "lock", path: path, code: code
            )
        }
        return fd
    }

    // MARK: - Internals

    private struct Segment {
        var firstSeq: UInt64
        var toCurrent: Bool
        var bytes: [UInt8]
    }

    /// Formats `entries` and splits them into per-file segments so that no file
    /// grows past `rotateSize` (a single oversized record still gets a file).
    private func plan(_ entries: [Entry]) -> [Segment] {
        var segments: [Segment] = []
        var segment = Segment(firstSeq: lastSeq + 1, toCurrent: current != nil, bytes: [])
        var fileSize = current?.size ?? 0
        var line: [UInt8] = []
        var seq = lastSeq
        for entry in entries {
            seq += 1
            line.removeAll(keepingCapacity: true)
            switch entry {
            case .reading(let reading): RecordFormat.appendReading(reading, seq: seq, to: &line)
            case .gap(let count, let device, let date): RecordFormat.appendGap(count: count, device: device, at: date, seq: seq, to: &line)
            }
            let used = fileSize + Int64(segment.bytes.count)
            if used > 0, used + Int64(line.count) > rotateSize {
                if !segment.bytes.isEmpty { segments.append(segment) }
                segment = Segment(firstSeq: seq, toCurrent: false, bytes: [])
                fileSize = 0
            }
            segment.bytes += line
        }
        segments.append(segment)
        return segments
    }

    /// Undoes a failed append: cut the current file back and delete new files.
    /// Best effort: if even that fails, the torn tail is cut by the next recovery.
    private func rollBack(currentSize: Int64?, created: [OpenFile]) {
        rollbackPending = true
        if let file = current, let currentSize {
            try? LogFileSystem.truncate(file.fd, to: currentSize, path: file.path, using: truncateCall)
        }
        for file in created {
            LogFileSystem.closeFile(file.fd)
            try? LogFileSystem.remove(file.path)
        }
    }

    /// Moves a file out of the append position; it stays open until `sync()` fsyncs it.
    /// Should many rotations happen between syncs (tiny rotateSize, huge batch), the
    /// oldest are synced right away rather than holding a descriptor each.
    private func retire(_ file: OpenFile) {
        unsyncedFinished.append(file)
        finished.append((file.path, file.size))
        while unsyncedFinished.count > 8 {
            let oldest = unsyncedFinished.removeFirst()
            do { try syncCall(oldest.fd, oldest.path) } catch { deferredSyncError = deferredSyncError ?? error }
            LogFileSystem.closeFile(oldest.fd)
        }
    }

    /// Deletes the oldest finished files while the total size exceeds `retainSize`.
    /// Failures are skipped: retention must never stop readings being written.
    private func applyRetention() {
        var total = finished.reduce(current?.size ?? 0) { $0 + $1.size }
        var kept: [(path: String, size: Int64)] = []
        for file in finished {
            if total > retainSize, (try? LogFileSystem.remove(file.path)) != nil {
                total -= file.size
                directoryNeedsSync = true
            } else {
                kept.append(file)
            }
        }
        finished = kept
    }
}

@available(*, unavailable, message: "ReadingLog has a single owner; share a ReadingRecorder instead")
extension ReadingLog: Sendable {}
