import BlueZ
import DBus
import EventLoop
import Glibc
import Synchronization
import Testing

/// The acquired socket's reader against a socketpair standing in for
/// bluetoothd: datagrams in order and in batches, the end after the last
/// datagram, an empty notification told from the end, close() draining.
struct SocketPairFailed: Error {}

@Suite struct NotificationSocketReaderTests {
    /// What the reader handed over, collected on the loop.
    final class Received: Sendable {
        let state = Mutex<(datagrams: [[UInt8]], ends: [NotificationSocketReader.End])>(([], []))
        var datagrams: [[UInt8]] { state.withLock { $0.datagrams } }
        var ends: [NotificationSocketReader.End] { state.withLock { $0.ends } }
    }

    /// A reader on a loop of its own; the reader lives on that loop.
    final class Fixture: @unchecked Sendable {
        let loop = EventLoop(name: "test-notify-socket")
        let bluetoothd: Int32
        let received = Received()
        var reader: NotificationSocketReader?

        init(mtu: UInt16 = 23) throws {
            var pair: [Int32] = [-1, -1]
            let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            guard socketpair(AF_UNIX, type, 0, &pair) == 0 else { throw SocketPairFailed() }
            bluetoothd = pair[0]
            let ours = pair[1]
            let received = received
            let done = Mutex(false)
            loop.execute { [self] in
                let reply: [DBusValue] = [.unixFD(UnixFileDescriptor(owning: ours)), .uint16(mtu)]
                guard let acquired = try? AcquiredNotifications(reply: reply) else { return }
                reader = NotificationSocketReader(acquired, loop: loop) { bytes in
                    received.state.withLock { $0.datagrams.append(bytes) }
                } onEnd: { end in
                    received.state.withLock { $0.ends.append(end) }
                }
                done.withLock { $0 = true }
            }
            while !done.withLock({ $0 }) { usleep(1000) }
        }

        func send(_ bytes: [UInt8]) { _ = Glibc.send(bluetoothd, bytes, bytes.count, 0) }

        func onLoop(_ body: @escaping @Sendable () -> Void) async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.execute { body(); continuation.resume() }
            }
        }

        func finish() async {
            await onLoop { [self] in reader?.close(); reader = nil }
            close(bluetoothd)
            loop.stop()
        }
    }

    static func wait(_ condition: () -> Bool) async {
        for _ in 0..<500 where !condition() { try? await Task.sleep(for: .milliseconds(2)) }
    }

    @Test func everyDatagramIsHandedOverInOrderThenTheEnd() async throws {
        let f = try Fixture()
        // More than one recvmmsg batch, queued before the loop looks.
        for i in 0..<200 { f.send([UInt8(i & 0xff), UInt8(i >> 8), 7]) }
        close(f.bluetoothd)  // bluetoothd's end goes (a link loss)
        await Self.wait { f.received.ends.count == 1 }
        #expect(f.received.datagrams.count == 200)
        #expect(f.received.datagrams.enumerated().allSatisfy { $0.element == [UInt8($0.offset & 0xff), UInt8($0.offset >> 8), 7] })
        #expect(f.received.ends == [.closedByBluetoothd])
        await f.onLoop { [f] in #expect(f.reader?.isOpen == false) }
        f.loop.stop()
    }

    @Test func anEmptyNotificationIsNotTheEnd() async throws {
        let f = try Fixture()
        f.send([])
        f.send([1])
        await Self.wait { f.received.datagrams.count == 2 }
        #expect(f.received.datagrams == [[], [1]])
        #expect(f.received.ends.isEmpty)
        await f.finish()
    }

    @Test func closingDrainsWhatIsQueuedAndGivesTheSocketBack() async throws {
        let f = try Fixture()
        // Hold the loop so the datagrams queue up unread, then close.
        let held = Mutex(false)
        f.loop.execute { held.withLock { $0 = true }; usleep(50_000) }
        while !held.withLock({ $0 }) { usleep(500) }
        for i in 0..<10 { f.send([UInt8(i)]) }
        await f.onLoop { [f] in f.reader?.close() }
        #expect(f.received.datagrams.count == 10, "queued datagrams are handed over before the close")
        #expect(f.received.ends.isEmpty, "no end reported for our own close")
        var byte: UInt8 = 0
        #expect(recv(f.bluetoothd, &byte, 1, Int32(MSG_DONTWAIT)) == 0, "bluetoothd's end sees the close")
        close(f.bluetoothd)
        f.loop.stop()
    }

    @Test func aMalformedReplyIsRefusedAndItsDescriptorClosed() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &pair) == 0)
        defer { close(pair[0]) }
        #expect(throws: BlueZError.self) {
            _ = try AcquiredNotifications(reply: [.unixFD(UnixFileDescriptor(owning: pair[1]))])
        }
        var byte: UInt8 = 0
        #expect(recv(pair[0], &byte, 1, Int32(MSG_DONTWAIT)) == 0, "the refused reply's descriptor is closed")
    }
}
