import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a datagram to systemd or journald did not go out, as the kernel said
/// it. Kept as the raw errno so a caller can tell "nobody listens"
/// (`ENOENT`, `ECONNREFUSED`) from "too big" (`EMSGSIZE`) without parsing text.
public struct UnixSocketError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The errno value.
    public let code: Int32

    public init(code: Int32) {
        self.code = code
    }

    public var description: String {
        "\(String(cString: strerror(code))) (errno \(code))"
    }
}
