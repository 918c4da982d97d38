import EventLoop
#if canImport(Glibc)
import Glibc
#endif

/// Waits, on an `EventLoop`, for a directory that does not exist yet: the
/// readings directory before `tether run` first creates it (at a gateway's
/// first boot the forwarder may well start first). inotify on the nearest
/// ancestor that exists, moved down as the missing components appear; no
/// timer, no polling.
///
/// Threading: confined to `loop`. Invariants: at most one watch; after
/// `onAppear` ran, or after `close()`, none.
final class DirectoryAppearance {
    private let loop: EventLoop
    private let path: String
    private let onAppear: () -> Void
    private var fd: Int32 = -1
    private var loopWatch: EventLoop.WatchID?
    private var watchedAncestor = ""
    private var ancestorWatch: Int32 = -1
    private var firstCheck: EventLoop.TimerID?
    private var buffer = [UInt8](repeating: 0, count: 4096)

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `onAppear` runs on the loop once `path` is a directory (at once, on
    /// the loop's next turn, if it already is one).
    init(path: String, loop: EventLoop, onAppear: @escaping () -> Void) throws(Failure) {
        loop.checkIsolated()
        self.loop = loop
        self.path = path
        self.onAppear = onAppear
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { throw Failure(description: "inotify_init1: \(String(cString: strerror(errno)))") }
        loopWatch = loop.watch(fd, interest: .readable) { [unowned self] _ in
            while read(fd, &buffer, buffer.count) > 0 {}
            check()
        }
        try watchNearestAncestor()
        // It may have appeared before the watch was in place.
        firstCheck = loop.schedule(after: .zero) { [unowned self] in
            firstCheck = nil
            check()
        }
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    private func check() {
        guard loopWatch != nil else { return }
        if Self.isDirectory(path) {
            close()
            onAppear()
        } else {
            // A component appeared (or went): watch the nearest ancestor again.
            try? watchNearestAncestor()
        }
    }

    private func watchNearestAncestor() throws(Failure) {
        var ancestor = path
        repeat {
            ancestor = ancestor.lastIndex(of: "/").map { String(ancestor[..<$0]) } ?? "."
            if ancestor.isEmpty { ancestor = "/" }
        } while !Self.isDirectory(ancestor) && ancestor != "/" && ancestor != "."
        guard ancestor != watchedAncestor else { return }
        if ancestorWatch >= 0 { _ = inotify_rm_watch(fd, ancestorWatch) }
        let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF) | UInt32(IN_ONLYDIR)
        ancestorWatch = inotify_add_watch(fd, ancestor, mask)
        guard ancestorWatch >= 0 else {
            throw Failure(description: "\(ancestor): cannot watch for \(path) to appear: \(String(cString: strerror(errno)))")
        }
        watchedAncestor = ancestor
    }

    func close() {
        if let firstCheck { loop.cancelTimer(firstCheck) }
        firstCheck = nil
        if let loopWatch { loop.removeWatch(loopWatch) }
        loopWatch = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }
}
