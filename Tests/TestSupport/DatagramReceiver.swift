import CSystemd
import Foundation

/// Plays systemd's or journald's side: a bound datagram socket whose
/// messages the test reads back.
public final class DatagramReceiver {
    /// One message as received; a passed descriptor's whole content is
    /// read (and the descriptor closed) right away.
    public struct Datagram: Equatable {
        public var payload: [UInt8]
        /// The content of the memfd that came instead of a payload, if any.
        public var passedFile: [UInt8]?
        /// The seals on the passed memfd (F_GET_SEALS), if one came.
        public var passedFileSeals: Int32?
    }

    public struct SocketFailure: Error, CustomStringConvertible {
        let operation: String
        let code: Int32
        public var description: String { "\(operation): \(String(cString: strerror(code)))" }
    }

    public let address: String
    private let descriptor: Int32

    /// Binds to `address`: a path, or `@name` for the abstract namespace.
    public init(address: String) throws {
        let result = tether_dgram_bind(address)
        guard result >= 0 else { throw SocketFailure(operation: "bind \(address)", code: -result) }
        self.address = address
        self.descriptor = result
    }

    /// An abstract-namespace socket under a name no other test uses; it
    /// vanishes with its descriptor, so nothing is left to clean up.
    public static func abstract() throws -> DatagramReceiver {
        try DatagramReceiver(address: "@tether-test-\(UUID().uuidString)")
    }

    deinit {
        close(descriptor)
    }

    /// The next queued datagram, or nil when none is queued now.
    public func receive() throws -> Datagram? {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var passed: Int32 = -1
        let count = buffer.withUnsafeMutableBytes { raw in
            tether_dgram_receive(descriptor, raw.baseAddress, raw.count, &passed)
        }
        if count == -Int(EAGAIN) { return nil }
        guard count >= 0 else { throw SocketFailure(operation: "receive", code: Int32(-count)) }
        var datagram = Datagram(payload: Array(buffer.prefix(count)))
        if passed >= 0 {
            defer { close(passed) }
            datagram.passedFileSeals = fcntl(passed, MemfdSeal.getSeals)
            datagram.passedFile = try Self.readAll(passed)
        }
        return datagram
    }

    /// Waits (polling) for the next datagram; fails the test's expectation
    /// through the thrown error rather than hanging.
    public func next() async throws -> Datagram {
        var received: Datagram?
        _ = try await eventually(timeout: .seconds(5)) {
            received = try receive()
            return received != nil
        }
        guard let received else { throw SocketFailure(operation: "wait for datagram", code: ETIMEDOUT) }
        return received
    }

    /// Reads from offset 0 with pread: the sender's writes left the shared
    /// file offset at the end.
    private static func readAll(_ descriptor: Int32) throws -> [UInt8] {
        var content: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { raw in
                pread(descriptor, raw.baseAddress, raw.count, off_t(content.count))
            }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw SocketFailure(operation: "pread", code: errno) }
            if count == 0 { return content }
            content += chunk.prefix(count)
        }
    }
}

/// Linux's memfd seal constants (linux/fcntl.h, kernel ABI). Glibc only
/// declares them under _GNU_SOURCE, which Swift's Glibc module is not built with.
public enum MemfdSeal {
    public static let getSeals: Int32 = 1024 + 10
    public static let shrink: Int32 = 0x0002
    public static let grow: Int32 = 0x0004
    public static let write: Int32 = 0x0008
}
