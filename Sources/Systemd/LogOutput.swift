import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging

extension LogHandler {
    /// The metadata an entry carries: the handler's own, then the provider's,
    /// then the call's, later ones winning (swift-log's documented order).
    public func mergedMetadata(for event: LogEvent) -> Logger.Metadata {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        return merged
    }
}

/// Writes log output to a descriptor, all of it or until it fails: a log
/// line is not worth retrying beyond EINTR, and must never block forever on
/// a closed reader.
public enum LogOutput {
    public static func write(_ bytes: [UInt8], to descriptor: Int32) {
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            var offset = 0
            while offset < buffer.count {
                let written = systemWrite(descriptor, base + offset, buffer.count - offset)
                if written < 0, errno == EINTR { continue }
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

/// write(2), named apart from `LogOutput.write`.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}
