import DBus
import Foundation
import Glibc
import Synchronization
import TestSupport
import Testing

/// Unix file descriptors (`h`) through the binding: passed both ways, owned
/// by the value that carries them, never leaked, refused where the
/// connection cannot pass them.
@Suite(.serialized) struct UnixFDTests {
    /// Whether every copy of the peer of `fd` is closed: a SEQPACKET socket
    /// then reads end-of-file (0) instead of would-block.
    private static func peerIsClosed(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_DONTWAIT)) == 0
    }

    private static func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        return (fds[0], fds[1])
    }

    private func withBuses(_ body: (Bus, Bus) async throws -> Void) async throws {
        let directory = try TemporaryDirectory("dbus-fd-test")
        let daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        let server = try await Bus.connect(address: daemon.address)
        let client = try await Bus.connect(address: daemon.address)
        defer { daemon.stop(); directory.remove() }
        do {
            try await body(server, client)
        } catch {
            await server.close(); await client.close()
            throw error
        }
        await server.close(); await client.close()
    }

    /// The shape of BlueZ's AcquireNotify: the reply carries one end of a
    /// socketpair and the MTU; the server keeps the other end.
    @Test func aDescriptorInAReplyReachesTheCallerAndWorks() async throws {
        try await withBuses { server, client in
            #expect(await server.canPassUnixFDs)
            #expect(await client.canPassUnixFDs)
            let kept = Mutex<Int32>(-1)
            try await server.requestName("org.example.Sockets")
            try await server.export("/org/example", [
                ExportedInterface(name: "org.example.Sockets", methods: [
                    "Acquire": .init(out: "hq") { _ in
                        let (ours, theirs) = try Self.socketPair()
                        kept.withLock { $0 = ours }
                        return [.unixFD(UnixFileDescriptor(owning: theirs)), .uint16(23)]
                    },
                ])
            ])
            let reply = try await client.call(
                destination: "org.example.Sockets", path: "/org/example", interface: "org.example.Sockets", method: "Acquire"
            )
            #expect(reply.count == 2)
            #expect(reply.last?.int64 == 23)
            let descriptor = try #require(reply.first?.unixFD?.take())
            #expect(reply.first?.unixFD?.take() == nil, "taken once")
            // The server's end talks to ours: one datagram per send.
            let serverEnd = kept.withLock { $0 }
            let datagram: [UInt8] = [1, 2, 3]
            #expect(send(serverEnd, datagram, 3, 0) == 3)
            var buffer = [UInt8](repeating: 0, count: 64)
            #expect(recv(descriptor, &buffer, 64, 0) == 3)
            #expect(Array(buffer.prefix(3)) == [1, 2, 3])
            // Ours is the only copy left (the server's went with its reply,
            // libdbus's with the messages): closing it hangs up the server's end.
            #expect(!Self.peerIsClosed(serverEnd))
            close(descriptor)
            #expect(Self.peerIsClosed(serverEnd))
            close(serverEnd)
        }
    }

    /// A descriptor nobody takes is closed with the value that carries it:
    /// the server's end then reads end-of-file.
    @Test func aDescriptorNobodyTakesIsClosed() async throws {
        try await withBuses { server, client in
            let kept = Mutex<Int32>(-1)
            try await server.requestName("org.example.Sockets")
            try await server.export("/org/example", [
                ExportedInterface(name: "org.example.Sockets", methods: [
                    "Acquire": .init(out: "h") { _ in
                        let (ours, theirs) = try Self.socketPair()
                        kept.withLock { $0 = ours }
                        return [.unixFD(UnixFileDescriptor(owning: theirs))]
                    },
                ])
            ])
            var reply: [DBusValue]? = try await client.call(
                destination: "org.example.Sockets", path: "/org/example", interface: "org.example.Sockets", method: "Acquire"
            )
            let serverEnd = kept.withLock { $0 }
            defer { close(serverEnd) }
            #expect(reply?.first?.unixFD != nil)
            #expect(!Self.peerIsClosed(serverEnd))
            reply = nil
            #expect(Self.peerIsClosed(serverEnd))
        }
    }

    /// A descriptor sent as an argument arrives as a working duplicate;
    /// the sender's own stays open and owned by the sender.
    @Test func aDescriptorAsAnArgumentIsDuplicated() async throws {
        try await withBuses { server, client in
            try await server.requestName("org.example.Sockets")
            try await server.export("/org/example", [
                ExportedInterface(name: "org.example.Sockets", methods: [
                    "Write": .init(in: "h") { call in
                        guard let fd = try call.argument(0).unixFD?.take() else { throw DBusError.malformed("no fd") }
                        defer { close(fd) }
                        _ = send(fd, [42], 1, 0)
                        return []
                    },
                ])
            ])
            let (ours, theirs) = try Self.socketPair()
            defer { close(ours) }
            let argument = UnixFileDescriptor(owning: theirs)
            _ = try await client.call(
                destination: "org.example.Sockets", path: "/org/example", interface: "org.example.Sockets", method: "Write",
                [.unixFD(argument)]
            )
            #expect(argument.borrowed == theirs, "still ours")
            var byte: UInt8 = 0
            #expect(recv(ours, &byte, 1, 0) == 1)
            #expect(byte == 42)
        }
    }

    @Test func theWireFormatRefusesDescriptors() throws {
        let (ours, theirs) = try Self.socketPair()
        close(ours)
        let message = Message(
            kind: .signal, serial: 1, path: "/a", interface: "org.example.A", member: "B",
            body: [.unixFD(UnixFileDescriptor(owning: theirs))]
        )
        #expect(throws: DBusError.self) { _ = try message.wireFormat() }
        #expect(DBusType(signature: "ah") == .array(.unixFD))
    }
}
