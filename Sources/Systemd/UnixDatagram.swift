import CSystemd

/// Swift's face on the C shim. Addresses use NOTIFY_SOCKET's notation: a
/// path, or `@name` for the abstract namespace.
enum UnixDatagram {
    static func send(_ bytes: [UInt8], to address: String) -> Result<Void, UnixSocketError> {
        let result = bytes.withUnsafeBytes { buffer in
            tether_dgram_send(address, buffer.baseAddress, buffer.count)
        }
        return result < 0 ? .failure(UnixSocketError(code: -result)) : .success(())
    }

    /// Sends `descriptor` alone; the caller still owns and closes it.
    static func send(descriptor: Int32, to address: String) -> Result<Void, UnixSocketError> {
        let result = tether_dgram_send_descriptor(address, descriptor)
        return result < 0 ? .failure(UnixSocketError(code: -result)) : .success(())
    }

    /// A sealed memfd holding `bytes`; the caller owns the returned descriptor.
    static func sealedMemoryFile(named name: String, containing bytes: [UInt8]) -> Result<Int32, UnixSocketError> {
        let result = bytes.withUnsafeBytes { buffer in
            tether_sealed_memfd(name, buffer.baseAddress, buffer.count)
        }
        return result < 0 ? .failure(UnixSocketError(code: -result)) : .success(result)
    }
}
