#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The newest record's `seq` in a readings directory, read without a lock
/// and without reading more than the last lines: what a status report
/// needs to say how far behind a reader (the forwarder) is.
///
/// The writer appends whole lines, so the last newline-terminated line of
/// the newest non-empty file is the newest record; a line still being
/// written (no newline yet) is not counted.
public enum ReadingLogTail {
    /// The newest complete record's seq; nil when the directory holds none.
    public static func lastSeq(inDirectory directory: String) throws -> UInt64? {
        let files = try LogFileSystem.listLogFiles(in: directory)
        for entry in files.reversed() {
            if let seq = try lastSeq(ofFile: entry.path) { return seq }
        }
        return nil
    }

    private static func lastSeq(ofFile path: String) throws -> UInt64? {
        let fd: Int32
        do {
            fd = try LogFileSystem.openFile(path, flags: O_RDONLY)
        } catch let error as ReadingLogError where error.code == ENOENT {
            return nil  // retention removed it since the listing
        }
        defer { close(fd) }
        let size = try LogFileSystem.size(of: fd, path: path)
        guard size > 0 else { return nil }
        let start = max(0, size - LogTailRecovery.maximumLineLength)
        let tail = try LogFileSystem.read(fd, offset: start, count: Int(size - start), path: path)
        return tail.withUnsafeBytes { bytes -> UInt64? in
            guard var end = bytes.lastIndex(of: UInt8(ascii: "\n")) else { return nil }
            while true {
                let lineStart = bytes[..<end].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
                if let seq = ReadingLogReader.seq(ofRecord: UnsafeRawBufferPointer(rebasing: bytes[lineStart..<end])) {
                    return seq
                }
                guard lineStart > 0 else { return nil }
                end = lineStart - 1
            }
        }
    }
}
