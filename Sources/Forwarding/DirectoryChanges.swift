import EventLoop
#if canImport(Glibc)
import Glibc
#endif

/// inotify on a readings directory, as a descriptor of an `EventLoop`:
/// `onChange` runs on the loop when files in it are created, written or
/// renamed (the daemon appends, rotates, retention deletes).
///
/// Threading: confined to `loop`. Invariants: the watch and the inotify
/// descriptor live from `init` to `close()`.
final class DirectoryChanges {
    private let loop: EventLoop
    private var fd: Int32
    private var watch: EventLoop.WatchID?
    private var buffer = [UInt8](repeating: 0, count: 16 << 10)

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init(directory: String, loop: EventLoop, onChange: @escaping () -> Void) throws(Failure) {
        loop.checkIsolated()
        self.loop = loop
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { throw Failure(description: "inotify_init1: \(String(cString: strerror(errno)))") }
        let mask = UInt32(IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE) | UInt32(IN_ONLYDIR)
        guard inotify_add_watch(fd, directory, mask) >= 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw Failure(description: "\(directory): cannot watch the readings directory: \(why)")
        }
        watch = loop.watch(fd, interest: .readable) { [unowned self] _ in
            // Every event means the same: read on. Drain them all.
            while read(fd, &buffer, buffer.count) > 0 {}
            onChange()
        }
    }

    func close() {
        if let watch { loop.removeWatch(watch) }
        watch = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }
}
