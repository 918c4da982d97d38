#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkSupervisor

/// The readings disk's faults, as the real `ReadingLog` meets them: its
/// write(2) and ftruncate(2) are replaced (`ReadingLog.writeCall`,
/// `truncateCall`) by these, which do the real call on a tmpfs file unless a
/// fault says otherwise.
///
/// Threading: `@unchecked Sendable` because the log's call slots are
/// `@Sendable`; a simulation is single-threaded and only it touches this.
final class DiskModel: @unchecked Sendable {
    var full = false
    var failing = false
    var shortWrites = false
    /// The next write is cut short and Tether dies in it: the rollback's
    /// ftruncate never happens, leaving a torn record.
    var dieInNextWrite = false
    /// Set when a write died (the simulation then kills Tether).
    private(set) var diedInWrite = false
    private var random: SimulationRandom

    init(seed: UInt64) { random = SimulationRandom(seed: seed) }

    func resetAfterDeath() {
        dieInNextWrite = false
        diedInWrite = false
    }

    func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        if diedInWrite { return -Int(EIO) }
        if dieInNextWrite, bytes.count > 1 {
            dieInNextWrite = false
            diedInWrite = true
            let torn = 1 + Int(random.next() % UInt64(bytes.count - 1))
            _ = systemWrite(fd, bytes.baseAddress, torn)
            return -Int(EIO)
        }
        if failing { return -Int(EIO) }
        if full {
            // Sometimes a little room is left: a prefix goes, then ENOSPC.
            guard random.chance(0.3), bytes.count > 1 else { return -Int(ENOSPC) }
            return systemWrite(fd, bytes.baseAddress, 1 + Int(random.next() % UInt64(bytes.count - 1)))
        }
        var count = bytes.count
        if shortWrites, count > 1, random.chance(0.5) { count = 1 + Int(random.next() % UInt64(count - 1)) }
        let written = systemWrite(fd, bytes.baseAddress, count)
        return written >= 0 ? written : -Int(errno)
    }

    func truncate(_ fd: Int32, _ size: Int64) -> Int32 {
        if diedInWrite { return -EIO }  // the process is gone: nothing cuts the torn tail
        return ftruncate(fd, off_t(size)) == 0 ? 0 : -errno
    }
}

/// write(2), under a name of its own: inside `DiskModel` the bare name means
/// its `write` method, and the C library's module is Glibc or Musl.
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }
