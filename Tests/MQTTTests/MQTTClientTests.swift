import EventLoop
import Foundation
import MQTT
import Synchronization
import TestSupport
import Testing

/// The libmosquitto client on an event loop of its own, against Debian's
/// mosquitto on a free loopback port.
@Suite(.serialized) struct MQTTClientTests {
    /// A client on its own loop, its events collected.
    final class Fixture: @unchecked Sendable {
        let loop = EventLoop(name: "test-mqtt")
        final class Events: Sendable {
            let mutex = Mutex<[MQTTClient.Event]>([])
            func append(_ event: MQTTClient.Event) { mutex.withLock { $0.append(event) } }
            var all: [MQTTClient.Event] { mutex.withLock { $0 } }
        }
        let events = Events()
        var client: MQTTClient?

        init(_ options: MQTTClient.Options) async throws {
            let made: Result<Void, MQTTError> = await onLoop { [self] in
                do throws(MQTTError) {
                    let client = try MQTTClient(options: options, loop: loop)
                    client.onEvent = { [events] event in events.append(event) }
                    self.client = client
                    try client.connect()
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            try made.get()
        }

        func onLoop<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
            await withCheckedContinuation { continuation in loop.execute { continuation.resume(returning: body()) } }
        }

        var all: [MQTTClient.Event] { events.all }
        var acknowledged: Int { all.filter { if case .published = $0 { true } else { false } }.count }
        var connects: Int { all.filter { $0 == .connected }.count }
        var losses: [MQTTError] { all.compactMap { if case .disconnected(let e) = $0 { e } else { nil } } }

        func close() async {
            await onLoop { [self] in client?.close(); client = nil }
            loop.stop()
        }
    }

    static func options(_ broker: MosquittoBroker, id: String = "tether-test") -> MQTTClient.Options {
        MQTTClient.Options(host: "127.0.0.1", port: broker.port, clientID: id, keepalive: .seconds(5))
    }

    @Test func publishesAreAcknowledgedAndReachASubscriber() async throws {
        let directory = try TemporaryDirectory("mqtt-test")
        defer { directory.remove() }
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "t/#", directory: directory.url)
        defer { subscriber.stop() }
        try await Task.sleep(for: .milliseconds(200))
        let f = try await Fixture(Self.options(broker))
        #expect(await eventually { f.connects == 1 })
        let ids: [Int32] = await f.onLoop { [f] in
            (0..<100).compactMap { i in try? f.client?.publish(.init(topic: "t/readings", payload: Array("r\(i)".utf8))) }
        }
        #expect(ids.count == 100)
        #expect(await eventually { f.acknowledged == 100 })
        #expect(await eventually { subscriber.lines.count == 100 })
        #expect(subscriber.lines.first == "t/readings r0")
        #expect(subscriber.lines.last == "t/readings r99")
        await f.close()
    }

    /// The broker going away is a `.disconnected` event; `connect()` once
    /// it is back reconnects. A connection that dies without DISCONNECT
    /// makes the broker publish the will.
    @Test func aLostBrokerIsReportedAndReconnectedAndTheWillIsPublished() async throws {
        let directory = try TemporaryDirectory("mqtt-test")
        defer { directory.remove() }
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        var options = Self.options(broker)
        options.will = .init(topic: "s/status", payload: Array("offline".utf8), qos: 1, retain: true)
        let f = try await Fixture(options)
        #expect(await eventually { f.connects == 1 })
        broker.stop()
        #expect(await eventually { f.losses.count == 1 }, "the loss is reported")
        try broker.start()
        let reconnected: Bool = await f.onLoop { [f] in (try? f.client?.connect()) != nil }
        #expect(reconnected)
        #expect(await eventually { f.connects == 2 })
        // The will: a second client dies (its loop stops without DISCONNECT).
        var dying = Self.options(broker, id: "dying")
        dying.will = .init(topic: "s/status", payload: Array("offline".utf8), qos: 1, retain: true)
        let g = try await Fixture(dying)
        #expect(await eventually { g.connects == 1 })
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "s/#", directory: directory.url)
        defer { subscriber.stop() }
        // The client falls silent without DISCONNECT (its loop stops): after
        // 1.5 keep-alives the broker gives it up and publishes its will.
        g.loop.stop()
        #expect(await eventually(timeout: .seconds(15)) { subscriber.lines.contains("s/status offline") })
        await f.close()
    }

    /// Mutual TLS: the right CA and a client certificate connect and
    /// publish; a CA that did not sign the server's certificate does not.
    @Test func mutualTLSConnectsAndAWrongCAIsRefused() async throws {
        let directory = try TemporaryDirectory("mqtt-tls")
        defer { directory.remove() }
        try TestCertificates.make(in: directory.path)
        let broker = try MosquittoBroker(
            directory: directory.url.appendingPathComponent("broker"),
            extraConfig: [
                "cafile \(directory.path)/ca.crt", "certfile \(directory.path)/server.crt",
                "keyfile \(directory.path)/server.key", "require_certificate true",
            ]
        )
        defer { broker.stop() }
        var options = Self.options(broker)
        options.tls = .init(caFile: directory.path + "/ca.crt", certFile: directory.path + "/client.crt", keyFile: directory.path + "/client.key")
        let good = try await Fixture(options)
        #expect(await eventually { good.connects == 1 }, "losses: \(good.losses)")
        let published: Bool = await good.onLoop { [good] in (try? good.client?.publish(.init(topic: "t/tls", payload: [1]))) != nil }
        #expect(published)
        #expect(await eventually { good.acknowledged == 1 })
        await good.close()

        options.tls = .init(caFile: directory.path + "/other.crt", certFile: directory.path + "/client.crt", keyFile: directory.path + "/client.key")
        // libmosquitto may find the handshake failing at once (connect()
        // throws) or on the loop (a `.disconnected` event): either way, a
        // refusal and never a connection.
        do {
            let bad = try await Fixture(options)
            #expect(await eventually { !bad.losses.isEmpty })
            #expect(bad.connects == 0)
            let loss = try #require(bad.losses.first)
            #expect(loss.kind == .tls, "\(loss)")
            #expect(loss.description.contains("certificate verify failed"), "OpenSSL's reason is named: \(loss)")
            #expect(loss.certificateRejection?.reason == .other, "a CA that did not sign it: \(loss)")
            print("figure: a wrong CA: \(loss.description)")
            await bad.close()
        } catch let error as MQTTError {
            print("figure: a wrong CA: \(error)")
            #expect(error.description.contains("TLS"))
        }
    }

    /// A server certificate that is valid only from tomorrow (what every
    /// certificate is to a gateway whose clock reads 1970): the handshake
    /// fails, and the error says the certificate is not valid yet, which a
    /// wrong CA file does not.
    @Test func aCertificateNotValidYetIsToldApartFromAnyOtherRejection() async throws {
        let directory = try TemporaryDirectory("mqtt-tls-clock")
        defer { directory.remove() }
        try TestCertificates.make(in: directory.path)
        try TestCertificates.makeNotYetValid(in: directory.path)
        let broker = try MosquittoBroker(
            directory: directory.url.appendingPathComponent("broker"),
            extraConfig: ["cafile \(directory.path)/ca.crt", "certfile \(directory.path)/future.crt", "keyfile \(directory.path)/server.key"]
        )
        defer { broker.stop() }
        var options = Self.options(broker)
        options.tls = .init(caFile: directory.path + "/ca.crt")
        // On loopback the handshake may fail inside connect_async (connect()
        // throws) or on the loop (a `.disconnected` event): the reason is
        // told either way.
        let f: Fixture
        do {
            f = try await Fixture(options)
        } catch let error as MQTTError {
            #expect(error.kind == .tls, "\(error)")
            #expect(error.certificateRejection?.reason == .notYetValid, "\(error)")
            #expect(error.description.contains("certificate is not yet valid"), "\(error)")
            print("figure: a certificate valid from tomorrow (failed inside connect): \(error.description)")
            return
        }
        #expect(await eventually { !f.losses.isEmpty })
        #expect(f.connects == 0)
        let loss = try #require(f.losses.first)
        #expect(loss.kind == .tls, "\(loss)")
        #expect(loss.certificateRejection?.reason == .notYetValid, "\(loss)")
        #expect(loss.certificateRejection?.code == 9, "X509_V_ERR_CERT_NOT_YET_VALID: \(loss)")
        #expect(loss.description.contains("certificate is not yet valid"), "\(loss)")
        print("figure: a certificate valid from tomorrow: \(loss.description)")
        // The kept reason belongs to that handshake: a reconnect that fails
        // otherwise (the broker gone) does not repeat it.
        broker.stop()
        let again: Bool = await f.onLoop { [f] in (try? f.client?.connect()) != nil }
        if again { #expect(await eventually { f.losses.count >= 2 }) }
        if f.losses.count >= 2 { #expect(f.losses[1].certificateRejection == nil, "\(f.losses[1])") }
        await f.close()
    }

    @Test func aWrongPasswordIsRefusedWithTheBrokersReason() async throws {
        let directory = try TemporaryDirectory("mqtt-test")
        defer { directory.remove() }
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"), passwords: ["gw17": "right"])
        defer { broker.stop() }
        var options = Self.options(broker)
        options.username = "gw17"
        options.password = "wrong"
        let f = try await Fixture(options)
        #expect(await eventually { !f.losses.isEmpty })
        let loss = try #require(f.losses.first)
        #expect(loss.description.contains("not authorised") || loss.description.contains("refused"), "\(loss)")
        #expect(loss.isCredentialRefusal, "\(loss.kind)")
        #expect(f.connects == 0)
        await f.close()
    }
}
