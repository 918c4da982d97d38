import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Waits, on an `EventLoop`, for a directory that does not exist yet: the
/// readings directory before `tether run` first creates it (at a gateway's
/// first boot the forwarder may well start first). inotify on the nearest
/// ancestor that exists, moved down as the missing components appear; no
/// timer, no polling.
///
/// Two ways to miss the directory, both seen under systemd (make e2e's
/// systemd-forward stalled with nothing forwarded): a component appears
/// between the check and the watch moving down to its parent, so each move
/// is followed by another check until the watch stays put; and systemd
/// creates a `StateDirectory=` as root, 0750, before it hands it to the
/// service's user, so watching it can fail with EACCES for a moment. Then
/// the watch stays on the ancestor above, whose IN_ATTRIB for the child
/// (the chown) brings the next check.
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
        // A component appeared (or went): watch the nearest ancestor again,
        // and look again after every move, since the next component may
        // have appeared before the new watch was in place.
        while !Self.isDirectory(path) {
            guard (try? watchNearestAncestor()) == true else { return }
        }
        close()
        onAppear()
    }

    /// Moves the watch to the nearest ancestor that exists; true if it moved.
    /// When that ancestor cannot be watched yet (EACCES while systemd hands
    /// it over) and another watch is in place, that one stays.
    @discardableResult
    private func watchNearestAncestor() throws(Failure) -> Bool {
        var ancestor = path
        repeat {
            ancestor = ancestor.lastIndex(of: "/").map { String(ancestor[..<$0]) } ?? "."
            if ancestor.isEmpty { ancestor = "/" }
        } while !Self.isDirectory(ancestor) && ancestor != "/" && ancestor != "."
        guard ancestor != watchedAncestor else { return false }
        // IN_ATTRIB: a child's owner or mode changed (a directory handed
        // over), which may make it watchable now.
        let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF) | UInt32(IN_ONLYDIR)
        let watch = inotify_add_watch(fd, ancestor, mask)
        guard watch >= 0 else {
            let reason = String(cString: strerror(errno))
            if ancestorWatch >= 0 { return false }
            throw Failure(description: "\(ancestor): cannot watch for \(path) to appear: \(reason)")
        }
        // inotify gives one watch per inode: a move back up may return the
        // descriptor already held, which must not then be removed.
        if ancestorWatch >= 0 && ancestorWatch != watch { _ = inotify_rm_watch(fd, ancestorWatch) }
        ancestorWatch = watch
        watchedAncestor = ancestor
        return true
    }

    func close() {
        if let firstCheck { loop.cancelTimer(firstCheck) }
        firstCheck = nil
        if let loopWatch { loop.removeWatch(loopWatch) }
        loopWatch = nil
        if fd >= 0 { closeDescriptor(fd) }
        fd = -1
    }

    deinit { if fd >= 0 { closeDescriptor(fd) } }
}

/// close(2), under a name of its own: inside a type with a `close()` method the
/// bare name means the method, and the C library's module is Glibc or Musl.
private func closeDescriptor(_ fd: Int32) { _ = close(fd) }
