import EventLoop
import Readings

/// A readings directory's `ReadingsDirectoryWatch` as a descriptor of an
/// `EventLoop`: `onChange` runs on the loop with what the events called for
/// (read on; list the directory first after a rotation).
///
/// Threading: confined to `loop`. Invariants: the loop watches the
/// descriptor from `init` to `close()`, and never after the watch is closed.
final class DirectoryChanges {
    private let loop: EventLoop
    private let watch: ReadingsDirectoryWatch
    private var loopWatch: EventLoop.WatchID?
    private var isOpen = true
    private var buffer = [UInt8](repeating: 0, count: 16 << 10)

    /// `onChange` gets what was drained, or the error that ended the watch
    /// (the directory deleted or moved): no more calls come after that.
    init(directory: String, loop: EventLoop, onChange: @escaping (Result<ReadingsDirectoryWatch.Changes, ReadingLogError>) -> Void) throws(ReadingLogError) {
        loop.checkIsolated()
        self.loop = loop
        watch = try ReadingsDirectoryWatch(directory: directory)
        loopWatch = loop.watch(watch.descriptor, interest: .readable) { [unowned self] _ in
            do throws(ReadingLogError) {
                onChange(.success(try watch.drain(into: &buffer)))
            } catch {
                stopWatching()
                onChange(.failure(error))
            }
        }
    }

    private func stopWatching() {
        if let loopWatch { loop.removeWatch(loopWatch) }
        loopWatch = nil
    }

    func close() {
        stopWatching()
        if isOpen { watch.close() }
        isOpen = false
    }

    deinit {
        if isOpen { watch.close() }
    }
}
