import EventLoop
@_spi(FaultInjection) import Forwarding
import Foundation
import Logging
import MQTT
import Simulator
import TestSupport
import Testing

/// `tether forward`'s engine against Debian's mosquitto, fed by the daemon
/// and the simulator: every notified sequence number must reach a QoS 1
/// persistent subscriber at least once, in order apart from redeliveries.
@Suite(.serialized) struct ForwarderTests {
    /// A forwarder on a loop of its own, reading the harness's readings.
    final class RunningForwarder: @unchecked Sendable {
        let loop = EventLoop(name: "test-forwarder")
        let forwarder: Forwarder

        init(_ settings: Forwarder.Settings, logger: Logger = Logger(label: "forwarder-test")) async throws {
            forwarder = Forwarder(settings: settings, loop: loop, logger: logger)
            let failure: Forwarder.StartFailure? = await withCheckedContinuation { continuation in
                loop.execute { [forwarder] in
                    do throws(Forwarder.StartFailure) {
                        try forwarder.start()
                        continuation.resume(returning: nil)
                    } catch {
                        continuation.resume(returning: error)
                    }
                }
            }
            if let failure { throw failure }
        }

        func stop() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.execute { [forwarder] in forwarder.stop(); continuation.resume() }
            }
            loop.stop()
        }

        /// As SIGKILL leaves it: no stop, no offline status, no last cursor store.
        func kill() { loop.stop() }
    }

    static func settings(_ harness: DaemonHarness, broker: MosquittoBroker, state: URL, batch: Int = 1) -> Forwarder.Settings {
        var settings = Forwarder.Settings(
            readingsDirectory: harness.readingsDirectory, cursor: ForwardCursor(path: state.appendingPathComponent("cursor").path),
            client: MQTTClient.Options(host: "127.0.0.1", port: broker.port, clientID: "tether-forward-test", keepalive: .seconds(5)),
            topic: "tether/test/{device}/readings", statusTopic: "tether/test/status", qos: 1, batch: batch
        )
        settings.retryMax = .seconds(4)
        return settings
    }

    /// Sequence numbers in the payloads of the records a subscriber received.
    static func sequences(_ lines: [String]) -> [UInt32] {
        lines.compactMap { line -> UInt32? in
            guard let range = line.range(of: #""hex":""#) else { return nil }
            let hex = line[range.upperBound...].prefix(8)
            guard hex.count == 8, let value = UInt32(hex, radix: 16) else { return nil }
            return value.byteSwapped  // little-endian on the wire
        }
    }

    struct Fixture {
        let harness: DaemonHarness
        let broker: MosquittoBroker
        let subscriber: MosquittoSubscriber
        let state: URL
    }

    static func fixture(rate: Double) async throws -> Fixture {
        var options = SimulatorOptions()
        options.notifyRate = rate
        let harness = try await DaemonHarness(simulator: options)
        let broker = try MosquittoBroker(directory: harness.directory.url.appendingPathComponent("broker"))
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "tether/test/+/readings", directory: harness.directory.url)
        let state = harness.directory.url.appendingPathComponent("forward-state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        try await harness.startDaemon()
        return Fixture(harness: harness, broker: broker, subscriber: subscriber, state: state)
    }

    /// Waits until every notification sent has reached the subscriber.
    static func delivered(_ f: Fixture, timeout: Duration = .seconds(20)) async -> (sent: [UInt32], received: [UInt32]) {
        var received: [UInt32] = []
        let sent = f.harness.sequencesSent()
        _ = await eventually(timeout: timeout) {
            f.harness.recorder?.flush()
            received = sequences(f.subscriber.lines)
            return Set(sent).isSubset(of: Set(received))
        }
        return (sent, received)
    }

    /// Repeats only go back: a sequence lower than one already received.
    static func outOfOrderApartFromRedeliveries(_ received: [UInt32]) -> Int {
        var seen = Set<UInt32>()
        var highest: UInt32 = 0
        var bad = 0
        for seq in received {
            if seq < highest, !seen.contains(seq) { bad += 1 }
            seen.insert(seq)
            highest = max(highest, seq)
        }
        return bad
    }

    @Test func everyReadingReachesTheBrokerAt200PerSecond() async throws {
        let f = try await Self.fixture(rate: 200)
        #expect(await f.harness.waitForState(.online))
        let forwarder = try await RunningForwarder(Self.settings(f.harness, broker: f.broker, state: f.state))
        try await Task.sleep(for: .seconds(20))
        await f.harness.simulator.setNotifyRate(0)
        let (sent, received) = await Self.delivered(f)
        let status = forwarder.forwarder.status
        await forwarder.stop()
        f.subscriber.stop()
        f.broker.stop()
        await f.harness.stop()
        print("figure: forward at 200/s for 20 s: \(sent.count) sent, \(received.count) received, \(Set(received).count) distinct")
        #expect(sent.count > 3500)
        let missing = Set(sent).subtracting(received)
        #expect(missing.isEmpty, "missing \(missing.count), seq \(missing.min() ?? 0)…\(missing.max() ?? 0)")
        #expect(Self.outOfOrderApartFromRedeliveries(received) == 0)
        #expect(status.gapRecords == 0)
        #expect(status.connected)
    }

    /// The broker down for 10 s mid-stream: the forwarder retries with
    /// backoff and, once it is back, catches up from its cursor. The
    /// subscriber comes back only after that, so what it missed must come
    /// from its persistent session, kept across the broker's restart.
    @Test func aBrokerDownForTenSecondsLosesNothing() async throws {
        let f = try await Self.fixture(rate: 200)
        #expect(await f.harness.waitForState(.online))
        let forwarder = try await RunningForwarder(Self.settings(f.harness, broker: f.broker, state: f.state))
        try await Task.sleep(for: .seconds(3))
        f.subscriber.stop()
        f.broker.stop()
        try await Task.sleep(for: .seconds(10))
        try f.broker.start()
        #expect(await eventually(timeout: .seconds(15)) { forwarder.forwarder.status.connected })
        try await Task.sleep(for: .seconds(3))
        await f.harness.simulator.setNotifyRate(0)
        let sentCount = f.harness.sequencesSent().count
        #expect(await eventually(timeout: .seconds(15)) { forwarder.forwarder.status.acknowledgedSeq >= UInt64(sentCount) })
        let back = try MosquittoSubscriber(port: f.broker.port, topic: "tether/test/+/readings", directory: f.harness.directory.url)
        let (sent, received) = await Self.delivered(f, timeout: .seconds(30))
        await forwarder.stop()
        back.stop()
        f.broker.stop()
        await f.harness.stop()
        print("figure: forward with the broker down 10 s: \(sent.count) sent, \(received.count) received, \(received.count - Set(received).count) repeated")
        let missing = Set(sent).subtracting(received)
        #expect(missing.isEmpty, "missing \(missing.count), seq \(missing.min() ?? 0)…\(missing.max() ?? 0)")
        #expect(Self.outOfOrderApartFromRedeliveries(received) == 0)
    }

    /// Killed mid-stream and started again: nothing lost; what was in flight
    /// (at most max_inflight messages) comes twice.
    @Test func aKilledForwarderRestartsFromItsCursor() async throws {
        let f = try await Self.fixture(rate: 200)
        #expect(await f.harness.waitForState(.online))
        let settings = Self.settings(f.harness, broker: f.broker, state: f.state)
        let first = try await RunningForwarder(settings)
        try await Task.sleep(for: .seconds(3))
        first.kill()
        try await Task.sleep(for: .seconds(2))
        let second = try await RunningForwarder(settings)
        try await Task.sleep(for: .seconds(2))
        await f.harness.simulator.setNotifyRate(0)
        let (sent, received) = await Self.delivered(f)
        await second.stop()
        f.subscriber.stop()
        f.broker.stop()
        await f.harness.stop()
        let repeated = received.count - Set(received).count
        print("figure: forwarder killed and restarted: \(sent.count) sent, \(repeated) delivered twice (max_inflight \(settings.client.maxInflight))")
        let missing = Set(sent).subtracting(received)
        #expect(missing.isEmpty, "missing \(missing.count), seq \(missing.min() ?? 0)…\(missing.max() ?? 0)")
        #expect(repeated <= settings.client.maxInflight)
    }

    /// A broker whose certificate the clock reads as not valid yet: the
    /// forwarder says so and waits on its backoff (here 60 s); the clock
    /// being set (the timerfd's notice, called here directly: setting the
    /// test machine's clock is not the test's to do) makes it connect at
    /// once, not at the end of that wait.
    @Test func aClockSetRetriesAHandshakeRefusedForTheClockAtOnce() async throws {
        let directory = try TemporaryDirectory("forward-clock")
        defer { directory.remove() }
        try TestCertificates.make(in: directory.path)
        try TestCertificates.makeNotYetValid(in: directory.path)
        let served = directory.path + "/served.crt"
        try FileManager.default.copyItem(atPath: directory.path + "/future.crt", toPath: served)
        let broker = try MosquittoBroker(
            directory: directory.url.appendingPathComponent("broker"),
            extraConfig: ["cafile \(directory.path)/ca.crt", "certfile \(served)", "keyfile \(directory.path)/server.key"]
        )
        defer { broker.stop() }
        let readings = directory.path + "/readings"
        try FileManager.default.createDirectory(atPath: readings, withIntermediateDirectories: true)
        var settings = Forwarder.Settings(
            readingsDirectory: readings, cursor: ForwardCursor(path: directory.path + "/cursor"),
            client: MQTTClient.Options(host: "127.0.0.1", port: broker.port, clientID: "tether-forward-clock", keepalive: .seconds(5),
                                       tls: .init(caFile: directory.path + "/ca.crt")),
            topic: "tether/test/{device}/readings", statusTopic: "tether/test/status", qos: 1, batch: 1
        )
        settings.retryInitial = .seconds(60)
        settings.retryMax = .seconds(60)
        let forwarder = try await RunningForwarder(settings)
        #expect(await eventually { forwarder.forwarder.status.lastError?.contains("cannot be verified until the clock is set") == true },
                "\(forwarder.forwarder.status)")
        // The "clock is set": the certificate the broker serves is valid now.
        broker.stop()
        try FileManager.default.removeItem(atPath: served)
        try FileManager.default.copyItem(atPath: directory.path + "/server.crt", toPath: served)
        try broker.start()
        try await Task.sleep(for: .seconds(1))
        #expect(!forwarder.forwarder.status.connected, "the backoff alone waits 60 s")
        let set = ContinuousClock.now
        forwarder.loop.execute { forwarder.forwarder.clockWasSet() }
        #expect(await eventually(timeout: .seconds(5)) { forwarder.forwarder.status.connected }, "\(forwarder.forwarder.status)")
        print("figure: connected \(set.duration(to: .now)) after the clock was set (the backoff's next retry was up to 60 s away)")
        await forwarder.stop()
    }
}
