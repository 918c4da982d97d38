import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A file's device and inode: what JOURNAL_STREAM records for the stream
/// systemd connected to stdout/stderr, so a process can tell whether its
/// stderr still goes there or was redirected (by a shell, or by `tether`
/// being run from a terminal inside a unit's environment).
public struct FileIdentity: Sendable, Hashable {
    public let device: UInt64
    public let inode: UInt64

    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    /// JOURNAL_STREAM's `device:inode` (both decimal), nil when malformed.
    public init?(journalStream: String) {
        let parts = journalStream.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        self.init(device: device, inode: inode)
    }

    /// The identity of an open descriptor, nil when it is not open.
    public init?(descriptor: Int32) {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        self.init(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }
}
