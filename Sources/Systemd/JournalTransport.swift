import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Gets an encoded entry into journald: as a datagram, or, when it is too
/// big for one, as a sealed memfd passed over the socket, as libsystemd's
/// sd_journal_sendv does. Without the second path a long message (a stack
/// of BlueZ errors, a dumped config) would be lost exactly when it matters.
enum JournalTransport {
    static func send(_ payload: [UInt8], to socketPath: String) -> Result<Void, UnixSocketError> {
        switch UnixDatagram.send(payload, to: socketPath) {
        case .success:
            return .success(())
        case .failure(let error) where error.code == EMSGSIZE || error.code == ENOBUFS:
            return sendThroughMemoryFile(payload, to: socketPath)
        case .failure(let error):
            return .failure(error)
        }
    }

    private static func sendThroughMemoryFile(_ payload: [UInt8], to socketPath: String) -> Result<Void, UnixSocketError> {
        UnixDatagram.sealedMemoryFile(named: "tether-journal", containing: payload).flatMap { descriptor in
            // journald gets its own reference with the message; ours goes.
            defer { close(descriptor) }
            return UnixDatagram.send(descriptor: descriptor, to: socketPath)
        }
    }
}
