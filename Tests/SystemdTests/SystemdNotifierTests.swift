import Foundation
import Systemd
import TestSupport
import Testing

@Suite struct SystemdNotifierTests {
    @Test(arguments: [false, true])
    func lifecycleMessagesArriveInOrder(abstract: Bool) async throws {
        let directory = try TemporaryDirectory("tether-notify")
        defer { directory.remove() }
        let receiver = abstract
            ? try DatagramReceiver.abstract()
            : try DatagramReceiver(address: directory.path + "/notify.socket")
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": receiver.address])
        #expect(notifier.isSupervised)
        #expect(notifier.socketAddress == receiver.address)

        #expect(notifier.ready() == .sent)
        #expect(notifier.status("2 devices connected") == .sent)
        #expect(notifier.watchdog() == .sent)
        #expect(notifier.stopping() == .sent)

        let messages = [
            try await receiver.next(), try await receiver.next(), try await receiver.next(), try await receiver.next(),
        ].map { NotifyDatagram($0.payload) }
        #expect(messages.map(\.keys) == [["READY"], ["STATUS"], ["WATCHDOG"], ["STOPPING"]])
        #expect(messages[0]["READY"] == "1")
        #expect(messages[1]["STATUS"] == "2 devices connected")
        #expect(messages[2]["WATCHDOG"] == "1")
        #expect(messages[3]["STOPPING"] == "1")
        #expect(try receiver.receive() == nil)
    }

    @Test func severalAssignmentsGoInOneDatagram() async throws {
        let receiver = try DatagramReceiver.abstract()
        let notifier = SystemdNotifier(socketAddress: receiver.address)
        #expect(notifier.send([("READY", "1"), ("STATUS", "up")]) == .sent)
        let datagram = try await receiver.next()
        #expect(String(decoding: datagram.payload, as: UTF8.self) == "READY=1\nSTATUS=up\n")
    }

    @Test func lineBreaksInValuesCannotForgeAssignments() async throws {
        let receiver = try DatagramReceiver.abstract()
        let notifier = SystemdNotifier(socketAddress: receiver.address)
        #expect(notifier.status("failed:\nREADY=1\r\nMAINPID=1") == .sent)
        let message = NotifyDatagram(try await receiver.next().payload)
        #expect(message.keys == ["STATUS"])
        #expect(message["STATUS"] == "failed: READY=1  MAINPID=1")
    }

    @Test(arguments: ["", "A=B", "READY\n", "X\r\nY"])
    func invalidKeySendsNothing(key: String) throws {
        let receiver = try DatagramReceiver.abstract()
        let notifier = SystemdNotifier(socketAddress: receiver.address)
        #expect(notifier.send([("STATUS", "fine"), (key, "1")]) == .invalidKey(key))
        // send is synchronous: had anything been sent, it would be queued now.
        #expect(try receiver.receive() == nil)
    }

    @Test(arguments: [[:], ["NOTIFY_SOCKET": ""]] as [[String: String]])
    func withoutNotifySocketEverythingIsANoOp(environment: [String: String]) {
        let notifier = SystemdNotifier(environment: environment)
        #expect(!notifier.isSupervised)
        #expect(notifier.socketAddress == nil)
        for outcome in [notifier.ready(), notifier.status("x"), notifier.watchdog(), notifier.stopping()] {
            #expect(outcome == .notSupervised)
            #expect(!outcome.isFailure)
        }
    }

    @Test func unreachableSocketIsReportedNotThrown() throws {
        let directory = try TemporaryDirectory("tether-notify")
        defer { directory.remove() }
        let missingPath = SystemdNotifier(socketAddress: directory.path + "/nobody.socket")
        #expect(missingPath.ready() == .failed(UnixSocketError(code: ENOENT)))
        #expect(missingPath.ready().isFailure)

        let missingAbstract = SystemdNotifier(socketAddress: "@tether-test-nobody-\(UUID().uuidString)")
        #expect(missingAbstract.ready() == .failed(UnixSocketError(code: ECONNREFUSED)))

        let relative = SystemdNotifier(socketAddress: "relative/notify.socket")
        #expect(relative.ready() == .failed(UnixSocketError(code: EAFNOSUPPORT)))

        let tooLong = SystemdNotifier(socketAddress: "/" + String(repeating: "x", count: 200))
        #expect(tooLong.ready() == .failed(UnixSocketError(code: ENAMETOOLONG)))
    }
}
