#if canImport(Glibc) || canImport(Musl)
#if canImport(Glibc)
import Glibc
#else
import Musl
#endif
import FoundationEssentials
import Synchronization

/// `tail -F` for a readings directory: delivers the records there now, then every
/// record the daemon appends, across rotation (new files) and retention (old
/// files deleted), until `stop()`.
///
/// Woken by inotify on the directory, never by a timer: `run` blocks in poll(2)
/// on the inotify descriptor and a stop pipe. A file being read stays open, so
/// retention deleting it does not lose its last records.
public final class ReadingLogFollower: Sendable {
    public let directory: String
    private let since: Date?
    private let watch: ReadingsDirectoryWatch
    /// `stop()` writes a byte to `stopPipe.write`; `run` polls `stopPipe.read`.
    private let stopPipe: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)

    /// Starts watching `directory` (so that nothing written from now on is missed).
    /// Throws a `ReadingLogError` if it cannot be watched or read.
    public init(directory: String, since: Date? = nil) throws {
        self.directory = directory
        self.since = since
        let watch = try ReadingsDirectoryWatch(directory: directory)
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            let error = LogFileSystem.failure("pipe", directory)
            watch.close()
            throw error
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        self.watch = watch
        stopPipe = (fds[0], fds[1])
    }

    deinit {
        watch.close()
        LogFileSystem.closeFile(stopPipe.read)
        LogFileSystem.closeFile(stopPipe.write)
    }

    /// Makes `run` return soon: at once while it waits, or after the batch it is
    /// delivering. Safe from any thread (a signal handler's dispatch source, say),
    /// also before `run`.
    public func stop() {
        guard !stopped.exchange(true, ordering: .sequentiallyConsistent) else { return }
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
    }

    private struct Stopped: Error {}

    /// Delivers the existing records (from `since`), then new ones as they are
    /// written, until `stop()` is called or `sink` throws (rethrown). Blocks the
    /// calling thread: give it a thread of its own. Call it once.
    ///
    /// Throws a `ReadingLogError` if the directory cannot be read, or is deleted or moved.
    public func run(_ sink: ReadingLogReader.Sink) throws {
        guard !running.exchange(true, ordering: .sequentiallyConsistent) else {
            throw LogFileSystem.failure("follow (already running)", directory, EBUSY)
        }
        let reader = try ReadingLogReader(directory: directory, since: since)
        func guardedSink(_ batch: UnsafeRawBufferPointer) throws {
            if stopped.load(ordering: .relaxed) { throw Stopped() }
            try sink(batch)
        }
        do {
            try reader.readAvailable(to: guardedSink)
            var events = [UInt8](repeating: 0, count: 64 << 10)
            while try waitForEvents() {
                let changes = try watch.drain(into: &events)
                try reader.readAvailable(listDirectory: changes.needsListing, to: guardedSink)
            }
        } catch is Stopped {
            return
        }
    }

    /// Blocks until inotify has events (true) or `stop()` was called (false).
    private func waitForEvents() throws -> Bool {
        var fds = [
            pollfd(fd: watch.descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            if stopped.load(ordering: .relaxed) { return false }
            let result = poll(&fds, nfds_t(fds.count), -1)
            if result < 0 {
                if errno == EINTR { continue }
                throw LogFileSystem.failure("poll", directory)
            }
            if fds[1].revents != 0 { return false }
            if fds[0].revents & Int16(POLLIN) != 0 { return true }
            if fds[0].revents != 0 { throw LogFileSystem.failure("poll", directory, EIO) }
        }
    }
}
#endif
