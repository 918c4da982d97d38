#if canImport(Glibc) || canImport(Musl)
#if canImport(Glibc)
import Glibc
#else
import Musl
#endif

/// inotify on a readings directory, non-blocking: what a reader of the log
/// needs to know to read on, and when to list the directory again.
///
/// Shared by `ReadingLogFollower` (which blocks in poll(2) on `descriptor`)
/// and the forwarder (which registers it with its event loop), so that both
/// watch the same events and read them the same way.
///
/// Threading: `drain` from one thread at a time; `close()` once, after the
/// last `drain`. Invariants: `descriptor` is a non-blocking inotify
/// descriptor with one watch on `directory` and, where it can be watched,
/// one on its parent, until `close()`.
public struct ReadingsDirectoryWatch: Sendable {
    public let directory: String
    public let descriptor: Int32
    /// The parent's watch (-1 if it could not be watched), and the
    /// directory's name in it. A directory removed while a file in it is
    /// still open (the writer's, a reader's) sends no IN_DELETE_SELF until
    /// the last of them closes; its parent's IN_DELETE comes at once.
    private let parentWatch: Int32
    private let name: [UInt8]

    /// What the events drained so far called for.
    public struct Changes: Sendable, Equatable {
        /// Any event: records may have been appended; read on.
        public var any = false
        /// A file was created or renamed into the directory (rotation), or
        /// events were lost: list the directory before reading on.
        public var needsListing = false
    }

    private static let mask = UInt32(IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)
    private static let listingEvents = UInt32(IN_CREATE | IN_MOVED_TO | IN_Q_OVERFLOW)
    /// Events that say the directory itself is gone.
    private static let goneEvents = UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT)
    /// The parent's events that may concern the directory.
    private static let parentMask = UInt32(IN_DELETE | IN_MOVED_FROM)

    /// Starts watching (nothing written from now on is missed). Throws a
    /// `ReadingLogError` naming the directory.
    public init(directory: String) throws(ReadingLogError) {
        self.directory = directory
        let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { throw LogFileSystem.failure("inotify_init1", directory) }
        guard inotify_add_watch(fd, directory, Self.mask | UInt32(IN_ONLYDIR)) >= 0 else {
            let error = LogFileSystem.failure("inotify_add_watch", directory)
            LogFileSystem.closeFile(fd)
            throw error
        }
        descriptor = fd
        let trimmed = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        let slash = trimmed.lastIndex(of: "/")
        let parent = slash.map { $0 == trimmed.startIndex ? "/" : String(trimmed[..<$0]) } ?? "."
        name = Array((slash.map { String(trimmed[trimmed.index(after: $0)...]) } ?? trimmed).utf8)
        // Best effort: without it, a removal is seen once the last file in
        // the directory is closed.
        parentWatch = name.isEmpty ? -1 : inotify_add_watch(fd, parent, Self.parentMask | UInt32(IN_ONLYDIR))
    }

    /// Reads every pending event into `buffer` (reused across calls; 64 KiB
    /// is plenty). Throws a `ReadingLogError` when the directory was
    /// deleted or moved: no more events will come.
    public func drain(into buffer: inout [UInt8]) throws(ReadingLogError) -> Changes {
        var changes = Changes()
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return changes }
                throw LogFileSystem.failure("read inotify", directory)
            }
            if count == 0 { return changes }
            var gone = false
            buffer.withUnsafeBytes { bytes in
                // struct inotify_event { int wd; uint32_t mask, cookie, len; char name[len]; }
                var offset = 0
                while offset + 16 <= count {
                    let watch = bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let mask = bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    if watch == parentWatch, watch >= 0 {
                        // Another entry of the parent, unless it names the directory.
                        let named = bytes[(offset + 16)..<min(offset + 16 + length, count)].prefix { $0 != 0 }
                        if mask & Self.parentMask != 0, named.elementsEqual(name) { gone = true }
                        offset += 16 + length
                        continue
                    }
                    if mask & Self.goneEvents != 0 { gone = true }
                    if mask & Self.listingEvents != 0 { changes.needsListing = true }
                    changes.any = true
                    offset += 16 + length
                }
            }
            if gone {
                throw ReadingLogError(operation: "follow (the directory was deleted or moved)", path: directory, code: ENOENT)
            }
            // A short read means the queue is empty: skip the EAGAIN read.
            if count < buffer.count / 2 { return changes }
        }
    }

    public func close() {
        LogFileSystem.closeFile(descriptor)
    }
}
#endif
