@testable import DBus
import Synchronization
import Testing

/// What only the in-process bus daemon has: its fault controls, its
/// counters, and the checks dbus-daemon makes that a well-behaved `Bus`
/// never provokes.
@Suite struct InProcessBusDaemonTests {
    @Test func aRestartedBusNamesConnectionsAfreshAndRefusesNoneAfter() async throws {
        let daemon = InProcessBusDaemon()
        let before = try await Bus.connect(to: daemon)
        #expect(await before.uniqueName == ":1.0")
        await daemon.stop()
        await before.waitUntilClosed()
        await #expect(throws: DBusError.connectFailed("the in-process bus is stopped")) {
            _ = try await Bus.connect(to: daemon)
        }
        await daemon.start()
        let after = try await Bus.connect(to: daemon)
        #expect(await after.uniqueName == ":1.0")
        #expect(await daemon.connectionNames == [":1.0"])
        await after.close()
        #expect(await daemon.connectionNames == [])
    }

    @Test func disconnectingAnUnknownNameDoesNothing() async throws {
        let daemon = InProcessBusDaemon()
        let bus = try await Bus.connect(to: daemon)
        #expect(await daemon.disconnect(":1.7") == false)
        #expect(await bus.isConnected)
        #expect(await daemon.disconnect(":1.0"))
        await bus.waitUntilClosed()
        #expect(await daemon.connectionNames == [])
    }

    /// A connection's messages are routed as it sends them and read later,
    /// in order: never inside the send.
    @Test func deliveryIsInOrderAndNeverInsideTheSend() async throws {
        let daemon = InProcessBusDaemon()
        let (emitter, receiver) = (try await Bus.connect(to: daemon), try await Bus.connect(to: daemon))
        let emitterName = await emitter.uniqueName
        let received = Received()
        _ = try await receiver.addSignalHandler(matchingAny: [MatchRule(sender: emitterName, interface: "org.example.Tick")]) {
            received.append($0.body.first?.int64.flatMap { UInt32(exactly: $0) } ?? 0, duringSend: received.sending)
        }
        let done = try await receiver.signals(matching: MatchRule(sender: emitterName, interface: "org.example.Done"))
        await emitter.sendTicks(1...100, marking: received)
        try await emitter.emit(path: "/t", interface: "org.example.Done", member: "Done")
        var iterator = done.makeAsyncIterator()
        _ = await iterator.next()
        #expect(received.values == Array(1...100))
        #expect(!received.anyDuringSend)
        await emitter.close()
        await receiver.close()
    }

    /// Each call and reply is routed once and read once; the counters say so.
    @Test func theCountersFollowEveryMessage() async throws {
        let daemon = InProcessBusDaemon()
        let (server, client) = (try await Bus.connect(to: daemon), try await Bus.connect(to: daemon))
        try await exportEcho(on: server)
        let name = await server.uniqueName
        let before = await daemon.statistics
        _ = try await client.call(destination: name, path: "/org/example", interface: "org.example.Echo", method: "Echo",
                                  [.variant(.byte(1))])
        let after = await daemon.statistics
        #expect(after.routed == before.routed + 2)
        #expect(after.delivered == before.delivered + 2)
        #expect(after.refused == before.refused)
        await server.close()
        await client.close()
    }

    /// The system bus passes on only replies to calls it saw: one nobody
    /// asked for is refused (`AccessDenied` to its sender), never delivered.
    @Test func aReplyNobodyAskedForIsNotDelivered() async throws {
        let daemon = InProcessBusDaemon()
        let (forger, victim) = (try await Bus.connect(to: daemon), try await Bus.connect(to: daemon))
        let before = await daemon.statistics
        let victimName = await victim.uniqueName
        try await forger.sendReply(toSerial: 1, of: victimName)
        _ = try await victim.nameOwner(of: "org.freedesktop.DBus")
        _ = try await forger.nameOwner(of: "org.freedesktop.DBus")
        let after = await daemon.statistics
        #expect(after.refused == before.refused + 1)
        // The two round trips and the AccessDenied error: the reply itself never.
        #expect(after.delivered == before.delivered + 3)
        await forger.close()
        await victim.close()
    }

    /// A caller gets at most `maxPendingRepliesPerConnection` calls awaiting
    /// replies at once; the next is answered `LimitsExceeded` by the bus.
    @Test func pendingRepliesAreBoundedPerCaller() async throws {
        let daemon = InProcessBusDaemon()
        await daemon.limitPendingReplies(perConnection: 1)
        let (server, client) = (try await Bus.connect(to: daemon), try await Bus.connect(to: daemon))
        let held = HeldCall()
        try await exportEcho(on: server, held: held)
        let name = await server.uniqueName
        let first = Task { () async throws(DBusError) -> [DBusValue] in
            try await client.call(destination: name, path: "/org/example", interface: "org.example.Echo", method: "Hold")
        }
        var started = held.started.makeAsyncIterator()
        _ = await started.next()
        await #expect(throws: DBusError.remote(
            name: DBusErrorName.limitsExceeded, message: "The maximum number of pending replies per connection has been reached"
        )) {
            _ = try await client.call(destination: name, path: "/org/example", interface: "org.example.Echo", method: "Echo",
                                      [.variant(.byte(1))])
        }
        held.letGo()
        #expect(try await first.value == [])
        await server.close()
        await client.close()
    }

    @Test func aConnectionCannotPassFileDescriptors() async throws {
        let daemon = InProcessBusDaemon()
        let bus = try await Bus.connect(to: daemon)
        #expect(await !bus.canPassUnixFDs)
        await bus.close()
    }
}

/// What a signal handler received, and whether a send was under way then.
private final class Received: Sendable {
    private let state = Mutex<(values: [UInt32], duringSend: Bool, sending: Bool)>(([], false, false))
    var sending: Bool { state.withLock { $0.sending } }
    func setSending(_ sending: Bool) { state.withLock { $0.sending = sending } }
    func append(_ value: UInt32, duringSend: Bool) {
        state.withLock {
            $0.values.append(value)
            $0.duringSend = $0.duringSend || duringSend
        }
    }
    var values: [UInt32] { state.withLock { $0.values } }
    var anyDuringSend: Bool { state.withLock { $0.duringSend } }
}

private extension Bus {
    /// Emits the ticks one after another in one piece of loop work, marked
    /// as sending while each send runs.
    func sendTicks(_ values: ClosedRange<UInt32>, marking received: Received) {
        for value in values {
            received.setSending(true)
            try? emit(path: "/t", interface: "org.example.Tick", member: "Tick", [.uint32(value)])
            received.setSending(false)
        }
    }

    /// A method return to a call `destination` never made.
    func sendReply(toSerial serial: UInt32, of destination: String) throws(DBusError) {
        try connection.send(OutgoingMessage.methodReturn(to: Message(kind: .methodCall, serial: serial, sender: destination), body: []))
    }
}
