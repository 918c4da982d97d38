import ControlAPI
import EventLoop
import Foundation
import Logging
import Synchronization
import Systemd
import TestSupport
import Testing
import TetherDaemon

/// `SupervisorWatchdog` against a link whose loop can be made to hang, and
/// a notify socket this test reads.
@Suite struct SupervisorWatchdogTests {
    /// A link whose loop answers pings only while `responsive` is true; the
    /// pings it ignored are answered (late) when it recovers.
    final class FakeLink: ControlledLink, @unchecked Sendable {
        let responsive = Mutex(true)
        private let held = Mutex<[@Sendable () -> Void]>([])

        var status: LinkStatus {
            LinkStatus(state: .online, device: "AA:BB:CC:DD:EE:FF")
        }

        func reconnect(waitingUpTo limit: Duration) async -> ReconnectOutcome { .pending(.online) }

        func rebind(waitingUpTo limit: Duration) async -> RebindOutcome { .fixedByConfig("AA:BB:CC:DD:EE:FF") }

        func ping(_ reply: @escaping @Sendable () -> Void) {
            if responsive.withLock({ $0 }) { reply() } else { held.withLock { $0.append(reply) } }
        }

        /// The watchdog never asks for it.
        func clockWasSet() {}

        func recover() {
            responsive.withLock { $0 = true }
            for reply in held.withLock({ h in defer { h = [] }; return h }) { reply() }
        }
    }

    /// The WATCHDOG=1 datagrams that arrive on `socket` within `period`.
    static func pings(on socket: DatagramReceiver, during period: Duration) async throws -> Int {
        try await Task.sleep(for: period)
        var count = 0
        while let datagram = try socket.receive() {
            if NotifyDatagram(datagram.payload)["WATCHDOG"] == "1" { count += 1 }
        }
        return count
    }

    @Test func petsOnlyWhileTheLoopAnswers() async throws {
        let socket = try DatagramReceiver.abstract()
        let link = FakeLink()
        let watchdog = SupervisorWatchdog(
            notifier: SystemdNotifier(socketAddress: socket.address), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        ) { link }
        let task = Task { await watchdog.run(timeout: .milliseconds(100), on: ContinuousClock()) }
        func pings(during period: Duration) async throws -> Int {
            try await Self.pings(on: socket, during: period)
        }
        let healthy = try await pings(during: .milliseconds(400))
        #expect(healthy >= 4, "a responsive loop is pinged every 50 ms: \(healthy) in 400 ms")

        link.responsive.withLock { $0 = false }
        _ = try await pings(during: .milliseconds(60))  // the tick in flight may still pet
        let stuck = try await pings(during: .milliseconds(400))
        #expect(stuck == 0, "a stuck loop must not be pinged: \(stuck)")

        link.recover()
        let recovered = try await pings(during: .milliseconds(400))
        #expect(recovered >= 4, "pings resume: \(recovered)")
        task.cancel()
        await task.value
    }

    @Test func withNoLinkYetTheDaemonItselfCounts() async throws {
        let socket = try DatagramReceiver.abstract()
        let watchdog = SupervisorWatchdog(
            notifier: SystemdNotifier(socketAddress: socket.address), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        ) { nil }
        let task = Task { await watchdog.run(timeout: .milliseconds(100), on: ContinuousClock()) }
        try await Task.sleep(for: .milliseconds(300))
        task.cancel()
        await task.value
        let count = try await Self.pings(on: socket, during: .zero)
        #expect(count >= 3, "waiting for the bus is not a hang: \(count) pings")
    }

    /// The forwarder's use: a bare `EventLoop`, wedged for a while by work
    /// that does not return.
    @Test func petsOnlyWhileAnEventLoopAnswers() async throws {
        let socket = try DatagramReceiver.abstract()
        let loop = EventLoop(name: "watched")
        defer { loop.stop() }
        let watchdog = SupervisorWatchdog(
            notifier: SystemdNotifier(socketAddress: socket.address), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
            loop: loop, loopName: "the test's loop"
        )
        let task = Task { await watchdog.run(timeout: .milliseconds(100), on: ContinuousClock()) }
        func pings(during period: Duration) async throws -> Int {
            try await Self.pings(on: socket, during: period)
        }
        let healthy = try await pings(during: .milliseconds(400))
        #expect(healthy >= 4, "a responsive loop is pinged every 50 ms: \(healthy) in 400 ms")

        loop.execute { usleep(700_000) }
        _ = try await pings(during: .milliseconds(60))  // the tick in flight may still pet
        let stuck = try await pings(during: .milliseconds(400))
        #expect(stuck == 0, "a wedged loop must not be pinged: \(stuck)")

        try await Task.sleep(for: .milliseconds(300))  // the wedge ends
        _ = try await pings(during: .milliseconds(60))
        let recovered = try await pings(during: .milliseconds(400))
        #expect(recovered >= 4, "pings resume: \(recovered)")
        task.cancel()
        await task.value
    }
}
