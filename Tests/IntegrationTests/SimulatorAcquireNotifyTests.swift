import BlueZ
import DBus
import Foundation
import Glibc
import Simulator
import TestSupport
import Testing

/// The simulator's AcquireNotify against BlueZ 5.66's (src/gatt-client.c;
/// ../shared/bluez-facts.md): one datagram per notification, the exclusion
/// rules, the socket's end on every link loss, crash and StopNotify, no
/// re-arming, and the two losses by design, each in the event log.
@Suite(.serialized) struct SimulatorAcquireNotifyTests {
    typealias Paths = SimulatorTests

    /// An acquired socket seen from the client's side.
    final class Acquired {
        let socket: Int32
        let mtu: UInt16
        init(_ reply: [DBusValue]) throws {
            let acquired = try AcquiredNotifications(reply: reply)
            socket = acquired.socket
            mtu = acquired.mtu
        }
        deinit { close(socket) }

        /// Every datagram queued now; `ended` once the peer closed.
        func drain() -> (datagrams: [[UInt8]], ended: Bool) {
            var out: [[UInt8]] = []
            var buffer = [UInt8](repeating: 0, count: 512)
            while true {
                let n = recv(socket, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if n > 0 { out.append(Array(buffer.prefix(n))); continue }
                return (out, n == 0)
            }
        }

        /// Sequence numbers of the datagrams received until `condition` holds on them or the end.
        func sequences(until condition: @escaping ([UInt32], Bool) -> Bool, timeout: Duration = .seconds(5)) async
            -> (sequences: [UInt32], ended: Bool)
        {
            var all: [UInt32] = []
            var ended = false
            _ = await eventually(timeout: timeout, every: .milliseconds(5)) {
                let (datagrams, end) = self.drain()
                all += datagrams.map(Self.sequence)
                ended = ended || end
                return condition(all, ended)
            }
            return (all, ended)
        }

        static func sequence(_ payload: [UInt8]) -> UInt32 {
            guard payload.count >= 4 else { return 0 }
            return UInt32(payload[0]) | UInt32(payload[1]) << 8 | UInt32(payload[2]) << 16 | UInt32(payload[3]) << 24
        }
    }

    static func acquire(_ f: SimulatorFixture, on bus: Bus? = nil) async throws -> Acquired {
        let reply = try await (bus ?? f.client).call(
            destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface,
            method: "AcquireNotify", [.vardict([:])]
        )
        return try Acquired(reply)
    }

    static func sent(_ f: SimulatorFixture) async -> [UInt32] {
        await f.simulator.events.filter { $0.kind == .notify }.compactMap(\.seq)
    }

    @Test func notifyAcquiredIsExportedForNotifyCharacteristicsOnly() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let objects = try await f.managedObjects()
            #expect(objects[Paths.tx]?[BlueZ.gattCharacteristicInterface]?["NotifyAcquired"] == .boolean(false))
            #expect(objects[Paths.rx]?[BlueZ.gattCharacteristicInterface]?["NotifyAcquired"] == nil)
            #expect(objects[Paths.rx]?[BlueZ.gattCharacteristicInterface]?["WriteAcquired"] == .boolean(false))
        }
    }

    /// Each notification is one datagram; Value is not touched and no
    /// PropertiesChanged goes out per notification; NotifyAcquired turns true.
    @Test func everyNotificationIsOneDatagramAndNoSignal() async throws {
        try await withSimulator({ $0.notifyRate = 200 }) { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            let acquired = try await Self.acquire(f)
            #expect(acquired.mtu == 247)
            let (received, ended) = await acquired.sequences { sequences, _ in sequences.count >= 100 }
            #expect(!ended)
            await f.simulator.setNotifyRate(0)
            try await Task.sleep(for: .milliseconds(50))
            let rest = acquired.drain().datagrams.map(Acquired.sequence)
            let all = received + rest
            let sent = await Self.sent(f)
            #expect(all == sent, "exactly the notifications sent, in order")
            #expect(all.first == 1)
            let messages = await signals.messages
            #expect(!messages.contains { $0.propertiesChanged(on: Paths.tx)?["Value"] != nil })
            #expect(messages.contains { $0.propertiesChanged(on: Paths.tx)?["NotifyAcquired"] == .boolean(true) })
            #expect(!messages.contains { $0.propertiesChanged(on: Paths.tx)?["Notifying"] != nil }, "Notifying is StartNotify's")
            let events = await f.simulator.events
            #expect(events.contains { $0.kind == .acquireNotify })
            #expect(events.contains { $0.kind == .notifySocketReady })
        }
    }

    /// Before the link's GATT client is ready, bluetoothd holds the reply
    /// until it is; without a link it refuses at once.
    @Test func theReplyWaitsForServicesToResolve() async throws {
        try await withSimulator({ $0.resolveDelay = .milliseconds(300) }) { f in
            try await f.connectAndResolve()
            await f.simulator.dropLink(reason: "timeout")
            // The objects stay (GATT cache); without a link the call is refused.
            #expect(await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])])
                == .remote(name: BlueZ.ErrorName.failed, message: "Not connected"), "no link: refused")
            let signals = try await f.record()
            try await f.call(Paths.device, BlueZ.deviceInterface, "Connect")
            let reply = try await f.client.callMessage(
                destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface,
                method: "AcquireNotify", [.vardict([:])]
            )
            let acquired = try Acquired(reply.body)
            _ = acquired
            let resolved = try await signals.wait {
                $0.propertiesChanged(on: Paths.device)?["ServicesResolved"] == .boolean(true)
            }
            #expect(resolved.serial < reply.serial, "ServicesResolved=true before the reply")
        }
    }

    @Test func startNotifyAndAcquireNotifyExcludeEachOtherAcrossClients() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let other = try await Bus.connect(address: f.daemon.address)
            // A notify session (another client's) makes AcquireNotify InProgress.
            _ = try await other.call(
                destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface, method: "StartNotify"
            )
            let refused = await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])])
            #expect(refused == .remote(name: BlueZ.ErrorName.inProgress, message: "In Progress"))
            _ = try await other.call(
                destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface, method: "StopNotify"
            )
            // Held: StartNotify and a second AcquireNotify are NotPermitted, from anyone.
            let acquired = try await Self.acquire(f)
            let notAcquired = DBusError.remote(name: BlueZ.ErrorName.notPermitted, message: "Notify acquired")
            #expect(await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "StartNotify") == notAcquired)
            await #expect(throws: notAcquired) {
                _ = try await other.call(
                    destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface,
                    method: "StartNotify"
                )
            }
            #expect(await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])]) == notAcquired)
            // Only `notify` characteristics (not read/write ones).
            #expect(await f.callError(Paths.rx, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])])
                == .remote(name: BlueZ.ErrorName.notSupported, message: "Operation is not supported"))
            // StopNotify from another client closes the socket.
            _ = try await other.call(
                destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface, method: "StopNotify"
            )
            #expect(await acquired.sequences { _, ended in ended }.ended)
            #expect(await f.simulator.events.contains { $0.kind == .notifyReleased && $0.reason == "stop-notify" })
            await other.close()
        }
    }

    /// A link loss closes the socket; after the reconnect nothing flows
    /// until the client acquires again (StartNotify sessions, by contrast,
    /// come back by themselves).
    @Test func aLinkLossClosesTheSocketAndNothingReArmsIt() async throws {
        try await withSimulator({ $0.notifyRate = 100 }) { f in
            try await f.connectAndResolve()
            let first = try await Self.acquire(f)
            _ = await first.sequences { sequences, _ in sequences.count >= 5 }
            await f.simulator.dropLink(reason: "supervision-timeout")
            #expect(await first.sequences { _, ended in ended }.ended, "end-of-file after the drop")
            #expect(await f.simulator.events.contains { $0.kind == .notifyReleased && $0.reason == "supervision-timeout" })
            try await f.connectAndResolve()
            try await Task.sleep(for: .milliseconds(200))
            let objects = try await f.managedObjects()
            #expect(objects[Paths.tx]?[BlueZ.gattCharacteristicInterface]?["NotifyAcquired"] == .boolean(false))
            let lastBefore = await f.simulator.lastSequence
            try await Task.sleep(for: .milliseconds(100))
            #expect(await f.simulator.lastSequence == lastBefore, "the dongle is not notifying: nobody subscribed")
            let second = try await Self.acquire(f)
            let (received, _) = await second.sequences { sequences, _ in sequences.count >= 5 }
            #expect(received.first.map { $0 > lastBefore } == true)
        }
    }

    @Test func aCrashClosesTheSocket() async throws {
        try await withSimulator({ $0.notifyRate = 100 }) { f in
            try await f.connectAndResolve()
            let acquired = try await Self.acquire(f)
            _ = await acquired.sequences { sequences, _ in sequences.count >= 3 }
            await f.simulator.crash(restartAfter: .seconds(30))
            #expect(await acquired.sequences { _, ended in ended }.ended)
            #expect(await f.simulator.events.contains { $0.kind == .notifyReleased && $0.reason == "bluetoothd-crash" })
        }
    }

    /// Closing our end gives the notifications back at once.
    @Test func closingTheSocketReleasesIt() async throws {
        try await withSimulator { f in
            try await f.connectAndResolve()
            let signals = try await f.record()
            var acquired: Acquired? = try await Self.acquire(f)
            _ = acquired
            acquired = nil
            _ = try await signals.wait { $0.propertiesChanged(on: Paths.tx)?["NotifyAcquired"] == .boolean(false) }
            #expect(await f.simulator.events.contains { $0.kind == .notifyReleased && $0.reason == "client-closed" })
            _ = try await Self.acquire(f)
        }
    }

    /// bluetoothd drops what the dongle notifies between the CCCD write and
    /// the socket; the log says which and why, and everything after arrives.
    @Test func notificationsBeforeTheSocketAreDroppedAndLogged() async throws {
        try await withSimulator({ $0.notifyRate = 200; $0.acquireSocketDelay = .milliseconds(100) }) { f in
            try await f.connectAndResolve()
            let acquired = try await Self.acquire(f)
            let (received, _) = await acquired.sequences { sequences, _ in sequences.count >= 20 }
            let events = await f.simulator.events
            let dropped = events.filter { $0.kind == .notifyDropped }
            #expect(dropped.count >= 5, "about 20 in 100 ms at 200/s, got \(dropped.count)")
            #expect(dropped.allSatisfy { $0.reason == "socket-not-ready" })
            let ready = try #require(events.first { $0.kind == .notifySocketReady })
            #expect(dropped.allSatisfy { $0.t <= ready.t })
            let firstReceived = try #require(received.first)
            #expect(firstReceived == (dropped.compactMap(\.seq).max() ?? 0) + 1)
        }
    }

    /// BlueZ 5.66 (fixed in 5.84 by 476ae809a): a link loss during the CCCD
    /// write leaves the acquisition behind. The call is never answered, and
    /// both ways to subscribe are refused until bluetoothd exits.
    @Test func aLinkLossDuringTheCCCDWriteLeavesAStaleAcquisition() async throws {
        try await withSimulator({ $0.acquireSocketDelay = .milliseconds(300) }) { f in
            try await f.connectAndResolve()
            let pending = Task {
                try await f.client.call(
                    destination: BlueZ.service, path: Paths.tx, interface: BlueZ.gattCharacteristicInterface,
                    method: "AcquireNotify", [.vardict([:])], timeout: .seconds(30)
                )
            }
            _ = await eventually { await f.simulator.events.contains { $0.kind == .acquireNotify } }
            await f.simulator.dropLink(reason: "supervision-timeout")
            #expect(await f.simulator.events.contains { $0.kind == .acquireStale && $0.reason == "supervision-timeout" })
            try await f.connectAndResolve()
            let notAcquired = DBusError.remote(name: BlueZ.ErrorName.notPermitted, message: "Notify acquired")
            #expect(await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "AcquireNotify", [.vardict([:])]) == notAcquired)
            #expect(await f.callError(Paths.tx, BlueZ.gattCharacteristicInterface, "StartNotify") == notAcquired)
            try await Task.sleep(for: .milliseconds(400))
            #expect(!(await f.simulator.events.contains { $0.kind == .notifySocketReady }), "no socket ever comes")
            // Only bluetoothd's exit clears it; the pending call fails then.
            await f.simulator.crash(restartAfter: .milliseconds(200))
            await #expect(throws: DBusError.self) { _ = try await pending.value }
            _ = await eventually { await f.simulator.events.contains { $0.kind == .restarted } }
            try await f.connectAndResolve()
            _ = try await Self.acquire(f)
        }
    }

    /// bluetoothd's end does not block: a reader that falls behind loses
    /// notifications, each logged as reader-behind; what was sent arrives.
    @Test func aSlowReaderLosesNotificationsAndTheLogSaysSo() async throws {
        try await withSimulator({ $0.notifyRate = 2000; $0.acquireSendBuffer = 4096 }) { f in
            try await f.connectAndResolve()
            let acquired = try await Self.acquire(f)
            try await Task.sleep(for: .milliseconds(500))  // not reading
            await f.simulator.setNotifyRate(0)
            try await Task.sleep(for: .milliseconds(50))
            let received = acquired.drain().datagrams.map(Acquired.sequence)
            let events = await f.simulator.events
            let dropped = events.filter { $0.kind == .notifyDropped }
            #expect(!dropped.isEmpty)
            #expect(dropped.allSatisfy { $0.reason == "reader-behind" })
            #expect(received == (await Self.sent(f)), "every notification logged as sent arrived")
            let all = Set(received).union(dropped.compactMap(\.seq))
            #expect(all.count == received.count + dropped.count)
            #expect(all == Set(1...(all.max() ?? 0)), "each notification either sent or dropped")
        }
    }
}
