import DBus
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The in-process bus daemon against dbus-daemon itself: each test runs on
/// both, with the same expectations, so that what the deterministic
/// simulation runs on is what the daemon meets on the system bus.
@Suite struct InProcessBusTests {
    private let echo: (path: ObjectPath, interface: String) = ("/org/example", "org.example.Echo")

    @Test(arguments: BusBackend.allCases)
    func helloGivesUniqueNamesInConnectionOrder(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 3) { (_, buses) async throws in
            var names: [String] = []
            for bus in buses { names.append(await bus.uniqueName) }
            #expect(names == [":1.0", ":1.1", ":1.2"])
        }
    }

    @Test(arguments: BusBackend.allCases)
    func aMethodCallIsAnsweredAndAnErrorReplyKeepsItsName(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (_, buses) async throws in
            let (server, client) = (buses[0], buses[1])
            try await exportEcho(on: server)
            let name = await server.uniqueName
            let reply = try await client.call(
                destination: name, path: echo.path, interface: echo.interface, method: "Echo", [.variant(.string("hi"))]
            )
            #expect(reply == [.variant(.string("hi"))])
            await #expect(throws: DBusError.remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) {
                _ = try await client.call(destination: name, path: echo.path, interface: echo.interface, method: "Fail")
            }
            // Refused from its header by the callee's Bus, and so answered by it.
            await #expect(throws: DBusError.remote(name: DBusErrorName.unknownObject, message: "No such object /nowhere")) {
                _ = try await client.call(destination: name, path: "/nowhere", interface: echo.interface, method: "Echo")
            }
        }
    }

    @Test(arguments: BusBackend.allCases)
    func aCallToANameNobodyOwnsIsAnsweredByTheBus(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 1) { (_, buses) async throws in
            let expected = DBusError.remote(
                name: DBusErrorName.serviceUnknown, message: "The name org.example.Nobody was not provided by any .service files"
            )
            await #expect(throws: expected) {
                _ = try await buses[0].call(destination: "org.example.Nobody", path: "/", interface: "org.example.I", method: "M")
            }
            await #expect(throws: DBusError.remote(
                name: DBusErrorName.nameHasNoOwner, message: "Could not get owner of name 'org.example.Nobody': no such name"
            )) {
                _ = try await buses[0].call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                    method: "GetNameOwner", [.string("org.example.Nobody")]
                )
            }
            #expect(try await buses[0].nameOwner(of: "org.example.Nobody") == nil)
        }
    }

    @Test(arguments: BusBackend.allCases)
    func aCallTheCalleeNeverAnswersTimesOut(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (_, buses) async throws in
            let (server, client) = (buses[0], buses[1])
            let held = HeldCall()
            try await exportEcho(on: server, held: held)
            let name = await server.uniqueName
            await #expect(throws: DBusError.timeout) {
                _ = try await client.call(
                    destination: name, path: echo.path, interface: echo.interface, method: "Hold", timeout: .milliseconds(100)
                )
            }
            // Its late answer is dropped, and the next call has its own.
            held.letGo()
            let reply = try await client.call(
                destination: name, path: echo.path, interface: echo.interface, method: "Echo", [.variant(.uint32(7))]
            )
            #expect(reply == [.variant(.uint32(7))])
        }
    }

    /// A broadcast signal reaches the connections whose rules match, and no
    /// other: what a connection without a matching rule saw of the first
    /// signal by the time the second one, which it matches, arrives
    /// (per sender and receiver, the bus keeps the order).
    @Test(arguments: BusBackend.allCases)
    func aBroadcastSignalReachesOnlyTheRulesThatMatchIt(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 3) { (_, buses) async throws in
            let (emitter, listener, other) = (buses[0], buses[1], buses[2])
            let emitterName = await emitter.uniqueName
            let ticks = try await listener.signals(
                matching: MatchRule(sender: emitterName, interface: "org.example.Tick", member: "Tick")
            )
            let tocks = try await other.signals(
                matching: MatchRule(sender: emitterName, interface: "org.example.Tick", member: "Tock")
            )
            let seen = SignalsSeen(watching: ["Tick", "Tock"])
            await seen.install(on: other)
            try await emitter.emit(path: "/t", interface: "org.example.Tick", member: "Tick", [.uint32(1)])
            try await emitter.emit(path: "/t", interface: "org.example.Tick", member: "Tock", [.uint32(2)])
            var tickIterator = ticks.makeAsyncIterator()
            #expect(await tickIterator.next()?.body == [.uint32(1)])
            var tockIterator = tocks.makeAsyncIterator()
            #expect(await tockIterator.next()?.body == [.uint32(2)])
            #expect(seen.seen == ["Tock"])
        }
    }

    /// A signal with a destination reaches it whatever its rules say (what
    /// a forger relies on); the receiving Bus drops it unread.
    @Test(arguments: BusBackend.allCases)
    func aUnicastSignalReachesAConnectionWithoutARule(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (_, buses) async throws in
            let (emitter, receiver) = (buses[0], buses[1])
            let emitterName = await emitter.uniqueName
            let receiverName = await receiver.uniqueName
            let tocks = try await receiver.signals(
                matching: MatchRule(sender: emitterName, interface: "org.example.Tick", member: "Tock")
            )
            let seen = SignalsSeen(watching: ["Tick", "Tock"])
            await seen.install(on: receiver)
            let dropsBefore = receiver.unreadDrops.signals
            try await emitter.emit(path: "/t", interface: "org.example.Tick", member: "Tick", destination: receiverName)
            try await emitter.emit(path: "/t", interface: "org.example.Tick", member: "Tock")
            var iterator = tocks.makeAsyncIterator()
            _ = await iterator.next()
            #expect(seen.seen == ["Tick", "Tock"])
            #expect(receiver.unreadDrops.signals == dropsBefore + 1)
        }
    }

    @Test(arguments: BusBackend.allCases)
    func aRequestedNameIsAnnouncedAndOwned(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 3) { (_, buses) async throws in
            let (service, watcher, rival) = (buses[0], buses[1], buses[2])
            let changes = try await watcher.nameOwnerChanges(of: "org.example.Service")
            var owners = changes.makeAsyncIterator()
            #expect(await owners.next() == .some(nil))
            let acquired = try await service.signals(matching: MatchRule(
                sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameAcquired", arg0: "org.example.Service"
            ))
            try await service.requestName("org.example.Service")
            let serviceName = await service.uniqueName
            #expect(await owners.next() == .some(serviceName))
            var acquisitions = acquired.makeAsyncIterator()
            let first = await acquisitions.next()
            #expect(first?.destination == serviceName)
            #expect(try await watcher.nameOwner(of: "org.example.Service") == serviceName)
            #expect(try await rival.processID(ofOwnerOf: "org.example.Service") == UInt32(getpid()))
            // Taken: the rival does not wait in line for it.
            await #expect(throws: DBusError.remote(
                name: DBusErrorName.failed, message: "the name org.example.Service is owned by another connection"
            )) { try await rival.requestName("org.example.Service") }
            try await service.releaseName("org.example.Service")
            #expect(await owners.next() == .some(nil))
        }
    }

    /// Bus+Admission believes what the stamped sender proves: a client's
    /// NameOwnerChanged is not the bus driver's, and a signal is a
    /// well-known name's only when its owner sent it.
    @Test(arguments: BusBackend.allCases)
    func forgedSignalsAreDroppedAndRealOnesBelieved(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 3) { (_, buses) async throws in
            let (victim, attacker, service) = (buses[0], buses[1], buses[2])
            let changes = try await victim.nameOwnerChanges(of: "org.example.Service")
            var owners = changes.makeAsyncIterator()
            #expect(await owners.next() == .some(nil))
            let victimName = await victim.uniqueName
            let attackerName = await attacker.uniqueName
            let dropsBefore = victim.unreadDrops.signals
            for destination in [victimName, nil] {
                try await attacker.emit(
                    path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    [.string("org.example.Service"), .string(""), .string(attackerName)], destination: destination
                )
            }
            try await settle(attacker)
            try await service.requestName("org.example.Service")
            let serviceName = await service.uniqueName
            #expect(await owners.next() == .some(serviceName))

            let ticks = try await victim.signals(
                matching: MatchRule(sender: "org.example.Service", interface: "org.example.Tick", member: "Tick", signature: "s")
            )
            for destination in [victimName, nil] {
                try await attacker.emit(path: "/t", interface: "org.example.Tick", member: "Tick", [.string("forged")], destination: destination)
            }
            try await settle(attacker)
            try await service.emit(path: "/t", interface: "org.example.Tick", member: "Tick", [.string("real")])
            var iterator = ticks.makeAsyncIterator()
            #expect(await iterator.next()?.body == [.string("real")])
            // The two addressed to the victim, dropped unread; the bus routed
            // the broadcasts to nobody, as no rule names the attacker.
            #expect(victim.unreadDrops.signals == dropsBefore + 2)
        }
    }

    /// A connection that ends (its process died) releases its names, and a
    /// caller waiting for it hears at once (NoReply), not at its timeout.
    @Test(.timeLimit(.minutes(1)), arguments: BusBackend.allCases)
    func aConnectionThatEndsReleasesItsNamesAndFailsItsCallers(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (network, buses) async throws in
            let (service, client) = (buses[0], buses[1])
            let held = HeldCall()
            try await exportEcho(on: service, held: held)
            try await service.requestName("org.example.Service")
            let changes = try await client.nameOwnerChanges(of: "org.example.Service")
            var owners = changes.makeAsyncIterator()
            #expect(await owners.next() == .some(await service.uniqueName))
            let call = Task { () async throws(DBusError) -> [DBusValue] in
                try await client.call(
                    destination: "org.example.Service", path: echo.path, interface: echo.interface, method: "Hold",
                    timeout: .seconds(3600)
                )
            }
            var started = held.started.makeAsyncIterator()
            _ = await started.next()
            await network.kill(service)
            #expect(await owners.next() == .some(nil))
            await #expect(throws: DBusError.timeout) { _ = try await call.value }
            await service.waitUntilClosed()
            #expect(await !service.isConnected)
            held.letGo()
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: BusBackend.allCases)
    func aStoppedBusClosesEveryConnection(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 3) { (network, buses) async throws in
            await network.stopBus()
            for bus in buses {
                await bus.waitUntilClosed()
                #expect(await !bus.isConnected)
            }
        }
    }
    /// RequestName's flags and queue, and ReleaseName, answer as dbus-daemon's.
    @Test(arguments: BusBackend.allCases)
    func requestNameQueuesAndReplacesAsTheBusDoes(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 4) { (_, buses) async throws in
            let (a, b, c, d) = (buses[0], buses[1], buses[2], buses[3])
            let name = "org.example.Queued"
            func request(_ bus: Bus, _ flags: UInt32) async throws -> UInt32? {
                try await driver(bus, "RequestName", [.string(name), .uint32(flags)]).first.flatMap(\.uint32Value)
            }
            func release(_ bus: Bus) async throws -> UInt32? {
                try await driver(bus, "ReleaseName", [.string(name)]).first.flatMap(\.uint32Value)
            }
            func owner() async throws -> String? { try await d.nameOwner(of: name) }
            let (allowReplacement, replaceExisting, doNotQueue): (UInt32, UInt32, UInt32) = (1, 2, 4)
            #expect(try await request(a, allowReplacement) == 1)  // primary owner
            #expect(try await request(a, allowReplacement) == 4)  // already owner
            #expect(try await request(b, 0) == 2)  // in queue
            #expect(try await request(c, doNotQueue) == 3)  // exists
            #expect(try await request(c, replaceExisting | doNotQueue) == 1)  // a allows it
            #expect(try await owner() == (await c.uniqueName))
            #expect(try await request(a, replaceExisting) == 2)  // c does not allow it: a waits
            #expect(try await release(d) == 3)  // not owner
            #expect(try await release(c) == 1)
            #expect(try await owner() == (await a.uniqueName))  // a stepped back behind c, ahead of b
            #expect(try await release(a) == 1)
            #expect(try await owner() == (await b.uniqueName))
            #expect(try await release(b) == 1)
            #expect(try await release(b) == 2)  // nobody owns it
            #expect(try await owner() == nil)
            await #expect(throws: DBusError.remote(
                name: DBusErrorName.invalidArgs, message: "Cannot acquire a service starting with ':' such as \":1.9\""
            )) { _ = try await driver(a, "RequestName", [.string(":1.9"), .uint32(0)]) }
        }
    }

    /// The driver's signals about a name changing hands come before its
    /// answer to whoever asked, and the old owner hears NameLost before
    /// NameOwnerChanged.
    @Test(arguments: BusBackend.allCases)
    func theDriverSignalsANameChangeBeforeItAnswers(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (_, buses) async throws in
            let (first, second) = (buses[0], buses[1])
            let name = "org.example.Handed"
            let heard = (first: Heard(), second: Heard())
            let rule = MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", arg0: name)
            _ = try await first.addSignalHandler(matchingAny: [rule]) { heard.first.append($0.member ?? "") }
            _ = try await second.addSignalHandler(matchingAny: [rule]) { heard.second.append($0.member ?? "") }
            _ = try await driver(first, "RequestName", [.string(name), .uint32(1)])
            #expect(heard.first.all == ["NameOwnerChanged", "NameAcquired"])
            _ = try await driver(second, "RequestName", [.string(name), .uint32(2)])
            #expect(heard.second.all == ["NameOwnerChanged", "NameOwnerChanged", "NameAcquired"])
            try await settle(first)
            #expect(heard.first.all == ["NameOwnerChanged", "NameAcquired", "NameLost", "NameOwnerChanged"])
        }
    }

    /// AddMatch's text is parsed as dbus-daemon parses it: a quote inside a
    /// value (written '\'') routes the signal that carries it, an unknown
    /// key and an unknown rule are refused with its error names.
    @Test(arguments: BusBackend.allCases)
    func matchRulesAreParsedAsTheBusParsesThem(_ backend: BusBackend) async throws {
        try await BusNetwork.with(backend, 2) { (_, buses) async throws in
            let (emitter, listener) = (buses[0], buses[1])
            let emitterName = await emitter.uniqueName
            let quoted = try await listener.signals(matching: MatchRule(
                sender: emitterName, interface: "org.example.Tick", member: "Tick", path: "/a/b", arg0: "it's, 'quoted'"
            ))
            let seen = SignalsSeen(watching: ["Tick"])
            await seen.install(on: listener)
            try await emitter.emit(path: "/a/b", interface: "org.example.Tick", member: "Tick", [.string("it's")])
            try await emitter.emit(path: "/a/b", interface: "org.example.Tick", member: "Tick", [.string("it's, 'quoted'")])
            var iterator = quoted.makeAsyncIterator()
            #expect(await iterator.next()?.body == [.string("it's, 'quoted'")])
            #expect(seen.seen == ["Tick"])
            await #expect(throws: DBusError.remote(name: DBusErrorName.matchRuleInvalid, message: "Unknown key \"bogus\" in match rule")) {
                _ = try await driver(listener, "AddMatch", [.string("type='signal',bogus='x'")])
            }
            await #expect(throws: DBusError.remote(
                name: DBusErrorName.matchRuleNotFound, message: "The given match rule wasn't found and can't be removed"
            )) {
                _ = try await driver(listener, "RemoveMatch", [.string("type='signal',member='Never'")])
            }
        }
    }

    /// A round trip to the bus driver: everything `bus` sent before has been
    /// routed, and everything routed to it before the answer, read.
    private func settle(_ bus: Bus) async throws {
        _ = try await bus.nameOwner(of: "org.freedesktop.DBus")
    }

    private func driver(_ bus: Bus, _ method: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await bus.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            method: method, arguments
        )
    }
}

/// What a synchronous signal handler heard, in order.
private final class Heard: Sendable {
    private let members = Mutex<[String]>([])
    func append(_ member: String) { members.withLock { $0.append(member) } }
    var all: [String] { members.withLock { $0 } }
}

private extension DBusValue {
    var uint32Value: UInt32? {
        if case .uint32(let value) = self { return value }
        return nil
    }
}
