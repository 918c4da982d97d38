#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call on the readings directory, e.g.
/// "write /var/lib/tether/readings/readings-…jsonl: No space left on device".
public struct ReadingLogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The failing operation ("open", "write", "fsync", …).
    public var operation: String
    public var path: String
    /// The `errno` value.
    public var code: Int32

    public init(operation: String, path: String, code: Int32) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    public var description: String {
        "\(operation) \(path): \(String(cString: strerror(code)))"
    }
}
