import DBus
import Foundation
import Synchronization
import TestSupport
import Testing

/// Exercises the binding against a private dbus-daemon started per test.
@Suite struct BusTests {
    let directory: TemporaryDirectory
    let daemon: BusDaemonProcess

    init() throws {
        directory = try TemporaryDirectory("dbus-test")
        daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
    }

    private func withBuses(_ body: (Bus, Bus) async throws -> Void) async throws {
        let server = try await Bus.connect(address: daemon.address)
        let client = try await Bus.connect(address: daemon.address)
        do {
            try await body(server, client)
        } catch {
            await server.close(); await client.close(); daemon.stop(); directory.remove()
            throw error
        }
        await server.close(); await client.close(); daemon.stop(); directory.remove()
    }

    /// `org.example.Echo` at /org/example on `server`: `Echo` answers with
    /// its argument, `Fail` with a BlueZ error.
    private func serveEcho(on server: Bus) async throws {
        try await server.requestName("org.example.Echo")
        try await server.export("/org/example", [
            ExportedInterface(name: "org.example.Echo", methods: [
                "Echo": .init(in: "v", out: "v") { call in [try call.argument(0)] },
                "Fail": .init { _ in
                    throw DBusError.remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
                },
            ])
        ])
    }

    @Test func helloGivesUniqueNames() async throws {
        try await withBuses { server, client in
            let a = await server.uniqueName
            let b = await client.uniqueName
            #expect(a.hasPrefix(":"))
            #expect(b.hasPrefix(":"))
            #expect(a != b)
        }
    }

    /// The bus tells whose process owns a name (what `tether status` names
    /// when the daemon does not answer), and nil for a name nobody owns.
    @Test func processIDOfANamesOwnerComesFromTheBus() async throws {
        try await withBuses { server, client in
            try await server.requestName("org.example.Owned")
            #expect(try await client.processID(ofOwnerOf: "org.example.Owned") == UInt32(getpid()))
            #expect(try await client.processID(ofOwnerOf: await server.uniqueName) == UInt32(getpid()))
            #expect(try await client.processID(ofOwnerOf: "org.example.Nobody") == nil)
        }
    }

    @Test func exportedMethodRoundTripsEveryType() async throws {
        try await withBuses { server, client in
            try await serveEcho(on: server)
            let samples: [DBusValue] = [
                .byte(7), .boolean(true), .int16(-3), .uint16(9), .int32(-70000), .uint32(70000),
                .int64(-1 << 40), .uint64(1 << 50), .double(2.5), .string("héllo"), .objectPath("/a/b_c"),
                .signature("a{sv}"), .bytes([0, 1, 2, 255]), .bytes([]),
                .vardict(["Powered": .boolean(true), "Name": .string("x")]),
                .array(element: .string, []),
                .structure([.string("s"), .uint32(1)]),
                .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), [
                    .init(.objectPath("/org/bluez/hci0"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                        .init(.string("org.bluez.Adapter1"), .vardict(["Powered": .boolean(false)]))
                    ]))
                ]),
            ]
            for sample in samples {
                let reply = try await client.call(
                    destination: "org.example.Echo", path: "/org/example", interface: "org.example.Echo",
                    method: "Echo", [.variant(sample)]
                )
                #expect(reply == [.variant(sample)], "round trip of \(sample.type)")
            }
            await #expect(throws: DBusError.remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) {
                _ = try await client.call(
                    destination: "org.example.Echo", path: "/org/example", interface: "org.example.Echo", method: "Fail"
                )
            }
        }
    }

    /// A call made from the same parts as the one before is sent as a copy of
    /// it (the keep-alive's case): each copy must be a call of its own, with
    /// its own serial and reply, and a call made from other parts must not
    /// be answered as the remembered one.
    @Test func repeatedCallsAreAnsweredOneByOne() async throws {
        try await withBuses { server, client in
            try await serveEcho(on: server)
            func echo(_ value: DBusValue, path: ObjectPath = "/org/example") async throws -> [DBusValue] {
                try await client.call(
                    destination: "org.example.Echo", path: path, interface: "org.example.Echo", method: "Echo",
                    [.variant(value)]
                )
            }
            let keepalive: DBusValue = .bytes([0x01])
            // Three identical calls in flight at once: three serials, three replies.
            try await withThrowingTaskGroup(of: [DBusValue].self) { group in
                for _ in 0..<3 { group.addTask { try await echo(keepalive) } }
                var replies = 0
                for try await reply in group {
                    #expect(reply == [.variant(keepalive)])
                    replies += 1
                }
                #expect(replies == 3)
            }
            #expect(try await echo(.bytes([0x02])) == [.variant(.bytes([0x02]))])
            #expect(try await echo(keepalive) == [.variant(keepalive)])
            await #expect(throws: DBusError.self, "another path is another call, not a copy of the last") {
                _ = try await echo(keepalive, path: "/org/elsewhere")
            }
            #expect(try await echo(keepalive) == [.variant(keepalive)])
        }
    }

    /// A prepared call (the keep-alive sent without a reply): each send is a
    /// call of its own, with its own serial, the same arguments, and the flag
    /// that tells the receiver not to answer; calls sent after it still come
    /// after it.
    @Test func aPreparedCallIsSentAsACopyEachTimeAndAsksForNoReply() async throws {
        try await withBuses { server, client in
            let received = Mutex<[Message]>([])
            try await server.requestName("org.example.Sink")
            try await server.export("/org/example", [
                ExportedInterface(name: "org.example.Sink", methods: [
                    "Take": .init(in: "aya{sv}") { call in
                        received.withLock { $0.append(call.message) }
                        return []
                    },
                    "Count": .init(out: "u") { _ in [.uint32(UInt32(received.withLock { $0.count }))] },
                ])
            ])
            let arguments: [DBusValue] = [.bytes([0x00]), .vardict(["type": .string("command")])]
            let call = try PreparedCall(
                destination: "org.example.Sink", path: "/org/example", interface: "org.example.Sink", method: "Take", arguments
            )
            for _ in 0..<3 { try await client.send(call) }
            // One connection's calls are served in order: the count comes after the three.
            let count = try await client.call(
                destination: "org.example.Sink", path: "/org/example", interface: "org.example.Sink", method: "Count"
            )
            #expect(count == [.uint32(3)])
            let messages = received.withLock { $0 }
            #expect(messages.count == 3)
            #expect(messages.allSatisfy { $0.noReplyExpected && $0.body == arguments })
            #expect(Set(messages.map(\.serial)).count == 3, "serials \(messages.map(\.serial))")
        }
    }

    /// The same prepared call, started: its copy asks for the reply (the
    /// template is left as it was) and the reply reaches the caller.
    @Test func aStartedPreparedCallWaitsForItsReply() async throws {
        try await withBuses { server, client in
            let name = try await serveDelayedEcho(on: server)
            let call = try PreparedCall(
                destination: name, path: "/delay", interface: "org.example.Delay", method: "Echo",
                [.uint32(0), .variant(.int32(7))]
            )
            try await client.send(call)
            for _ in 0..<2 {
                let reply = await withCheckedContinuation { continuation in
                    Task { await client.startCall(call, timeout: .seconds(5)) { continuation.resume(returning: $0) } }
                }
                #expect(try reply.get().body == [.variant(.int32(7))])
            }
        }
    }

    @Test func invalidNamesAreErrorsNotAborts() async throws {
        try await withBuses { _, client in
            await #expect(throws: DBusError.self) {
                _ = try await client.call(destination: "not a name!", path: "/x", interface: "a.b", method: "M")
            }
            await #expect(throws: DBusError.self) {
                _ = try await client.call(destination: "org.example.X", path: "/x", interface: "no-dots", method: "M")
            }
            await #expect(throws: DBusError.self) {
                _ = try await client.call(destination: "org.example.X", path: "/x", interface: "a.b", method: "bad.member")
            }
            await #expect(throws: DBusError.self) {
                _ = try await client.call(destination: nil, path: "/x", interface: "a.b", method: "M", [.string("nul\u{0}inside")])
            }
            let bad = ["/trailing/", "relative", "/double//slash", "/dash-not-allowed"]
            for text in bad { #expect(ObjectPath(text) == nil) }
        }
    }

    @Test func callTimesOutWithNoReply() async throws {
        try await withBuses { server, client in
            try await server.export("/slow", [
                ExportedInterface(name: "org.example.Slow", methods: [
                    "Wait": .init { _ in try? await Task.sleep(for: .seconds(5)); return [] }
                ])
            ])
            let name = await server.uniqueName
            let start = ContinuousClock.now
            await #expect(throws: DBusError.timeout) {
                _ = try await client.call(
                    destination: name, path: "/slow", interface: "org.example.Slow", method: "Wait",
                    timeout: .milliseconds(200)
                )
            }
            #expect(ContinuousClock.now - start < .seconds(3))
            #expect(DBusError.timeout.name == "org.freedesktop.DBus.Error.NoReply")
        }
    }

    /// `org.example.Delay.Echo(ms, value)` at /delay on `server`: answers
    /// with `value` after `ms` milliseconds, each call on its own.
    private func serveDelayedEcho(on server: Bus) async throws -> String {
        try await server.export("/delay", [
            ExportedInterface(name: "org.example.Delay", methods: [
                "Echo": .init(in: "uv", out: "v") { call in
                    guard case .uint32(let ms) = try call.argument(0) else { return [] }
                    try? await Task.sleep(for: .milliseconds(Int(ms)))
                    return [try call.argument(1)]
                }
            ])
        ])
        return await server.uniqueName
    }

    private func delayedEcho(_ client: Bus, _ server: String, after ms: UInt32, _ value: Int32, timeout: Duration = .seconds(5))
        async throws(DBusError) -> DBusValue?
    {
        try await client.call(
            destination: server, path: "/delay", interface: "org.example.Delay", method: "Echo",
            [.uint32(ms), .variant(.int32(value))], timeout: timeout
        ).first
    }

    /// Replies are matched to calls by their serial: each caller gets its
    /// own answer whatever order the answers come in.
    @Test func answersInAnotherOrderReachTheirOwnCallers() async throws {
        try await withBuses { server, client in
            let name = try await serveDelayedEcho(on: server)
            async let slow = delayedEcho(client, name, after: 400, 1)
            async let middle = delayedEcho(client, name, after: 200, 2)
            async let fast = delayedEcho(client, name, after: 0, 3)
            let answers = try await [slow, middle, fast]
            #expect(answers == [.variant(.int32(1)), .variant(.int32(2)), .variant(.int32(3))])
        }
    }

    /// A call that timed out completes once, with `.timeout`; its answer,
    /// coming later, is dropped and reaches no other call.
    @Test func anAnswerAfterTheTimeoutIsDropped() async throws {
        try await withBuses { server, client in
            let name = try await serveDelayedEcho(on: server)
            await #expect(throws: DBusError.timeout) {
                _ = try await delayedEcho(client, name, after: 300, 1, timeout: .milliseconds(100))
            }
            // In flight while the late answer to the first call arrives.
            let second = try await delayedEcho(client, name, after: 500, 2)
            #expect(second == .variant(.int32(2)))
        }
    }

    /// A cancelled call completes with `.cancelled` at once; its answer is
    /// dropped, and calls after it are answered as usual.
    @Test func aCancelledCallEndsAtOnceAndItsAnswerIsDropped() async throws {
        try await withBuses { server, client in
            let name = try await serveDelayedEcho(on: server)
            let cancelled = Task { () async throws(DBusError) -> DBusValue? in
                try await delayedEcho(client, name, after: 300, 1)
            }
            try await Task.sleep(for: .milliseconds(50))
            let start = ContinuousClock.now
            cancelled.cancel()
            await #expect(throws: DBusError.cancelled) { _ = try await cancelled.value }
            #expect(ContinuousClock.now - start < .milliseconds(250))
            let next = try await delayedEcho(client, name, after: 400, 2)
            #expect(next == .variant(.int32(2)))
        }
    }

    @Test func signalsArriveInOrderThroughMatchRules() async throws {
        try await withBuses { server, client in
            let stream = try await client.signals(matching: MatchRule(interface: "org.example.Tick", member: "Tick"))
            for i in 0..<500 {
                try await server.emit(path: "/ticker", interface: "org.example.Tick", member: "Tick", [.uint32(UInt32(i))])
            }
            try await server.emit(path: "/ticker", interface: "org.example.Other", member: "Tick", [.uint32(9999)])
            var received: [UInt32] = []
            for await signal in stream {
                if case .uint32(let n)? = signal.body.first { received.append(n) }
                if received.count == 500 { break }
            }
            #expect(received == Array(0..<500))
        }
    }

    @Test func propertiesAndObjectManager() async throws {
        try await withBuses { server, client in
            await server.enableObjectManager(at: "/")
            let serverName = await server.uniqueName
            let added = try await client.signals(matching: MatchRule(interface: "org.freedesktop.DBus.ObjectManager"))
            let changed = try await client.signals(matching: MatchRule(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged"))
            try await server.export("/org/example/hci0", [
                ExportedInterface(
                    name: "org.example.Adapter1", properties: ["Powered": .boolean(true)], writable: ["Powered"],
                    setter: { name, value in
                        try await server.setProperties("/org/example/hci0", "org.example.Adapter1", [name: value])
                    })
            ])
            var iterator = added.makeAsyncIterator()
            let signal = try #require(await iterator.next())
            #expect(signal.member == "InterfacesAdded")
            let interfaces = try #require(signal.body[1].stringKeyedDictionary)
            #expect(Set(interfaces.keys) == ["org.example.Adapter1", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties"])

            let managed = try await client.call(
                destination: serverName, path: "/", interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects"
            )
            #expect(managed.first?.objectPathKeyedDictionary?.keys.contains("/org/example/hci0") == true)

            try await client.setRemoteProperty(
                destination: serverName, path: "/org/example/hci0", interface: "org.example.Adapter1", name: "Powered",
                value: .boolean(false)
            )
            var changes = changed.makeAsyncIterator()
            let change = try #require(await changes.next())
            #expect(change.body[1].stringKeyedDictionary?["Powered"]?.bool == false)
            let powered = try await client.getProperty(
                destination: serverName, path: "/org/example/hci0", interface: "org.example.Adapter1", name: "Powered"
            )
            #expect(powered == .boolean(false))
            let xml = try await client.call(
                destination: serverName, path: "/org/example/hci0", interface: "org.freedesktop.DBus.Introspectable", method: "Introspect"
            )
            #expect(xml.first?.string?.contains("access=\"readwrite\"") == true)

            try await server.unexport("/org/example/hci0")
            let removed = try #require(await iterator.next())
            #expect(removed.member == "InterfacesRemoved")
            await #expect(throws: DBusError.self) {
                _ = try await client.getProperty(
                    destination: serverName, path: "/org/example/hci0", interface: "org.example.Adapter1", name: "Powered"
                )
            }
        }
    }

    @Test func livePropertiesAreReadOnEveryGetAndNotSignalled() async throws {
        try await withBuses { server, client in
            let counter = Mutex<UInt64>(0)
            try await server.export("/org/example/counter", [
                ExportedInterface(
                    name: "org.example.Counter1", properties: ["Name": .string("c")],
                    live: { ["Count": .uint64(counter.withLock { $0 })] }
                )
            ])
            let serverName = await server.uniqueName
            func count() async throws -> UInt64? {
                try await client.getProperty(
                    destination: serverName, path: "/org/example/counter", interface: "org.example.Counter1", name: "Count"
                ).uint64
            }
            #expect(try await count() == 0)
            counter.withLock { $0 = 41 }
            #expect(try await count() == 41)
            let all = try await client.getAllProperties(
                destination: serverName, path: "/org/example/counter", interface: "org.example.Counter1"
            )
            #expect(all["Count"]?.uint64 == 41 && all["Name"]?.string == "c")
            let xml = try await client.call(
                destination: serverName, path: "/org/example/counter", interface: "org.freedesktop.DBus.Introspectable",
                method: "Introspect"
            ).first?.string ?? ""
            #expect(xml.contains("<property name=\"Count\" type=\"t\" access=\"read\">"))
            #expect(xml.contains("EmitsChangedSignal\" value=\"false\""))
            #expect(xml.contains("<property name=\"Name\" type=\"s\" access=\"read\"/>"))
        }
    }

    @Test func nameOwnerChangesFollowAServiceThatComesAndGoes() async throws {
        try await withBuses { _, client in
            let owners = try await client.nameOwnerChanges(of: "org.example.Service")
            var iterator = owners.makeAsyncIterator()
            #expect(await iterator.next() == .some(nil))
            let service = try await Bus.connect(address: daemon.address)
            try await service.requestName("org.example.Service")
            let owner = await iterator.next()
            #expect(owner == .some(await service.uniqueName))
            await service.close()
            #expect(await iterator.next() == .some(nil))
        }
    }

    @Test func closingFailsPendingCallsAndEndsStreams() async throws {
        try await withBuses { server, client in
            try await server.export("/slow", [
                ExportedInterface(name: "org.example.Slow", methods: [
                    "Wait": .init { _ in try? await Task.sleep(for: .seconds(5)); return [] }
                ])
            ])
            let name = await server.uniqueName
            let stream = try await client.signals(matching: MatchRule(interface: "org.example.Never"))
            let pending = Task { () async throws(DBusError) -> [DBusValue] in
                try await client.call(destination: name, path: "/slow", interface: "org.example.Slow", method: "Wait")
            }
            try await Task.sleep(for: .milliseconds(100))
            await client.close()
            await #expect(throws: DBusError.disconnected) { _ = try await pending.value }
            var count = 0
            for await _ in stream { count += 1 }
            #expect(count == 0)
            await #expect(throws: DBusError.disconnected) {
                _ = try await client.call(destination: name, path: "/slow", interface: "org.example.Slow", method: "Wait")
            }
        }
    }
}

/// A regression test: libdbus closes its socket right after removing a watch,
/// and the next connection often gets the same fd number. Watching the raw fd
/// left libdispatch with a stale registration and about 1 connect in 100 never
/// saw its Hello reply.
@Suite struct BusReconnectTests {
    @Test func manyConnectsInARowAllComplete() async throws {
        let directory = try TemporaryDirectory("dbus-churn")
        let daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        defer {
            daemon.stop()
            directory.remove()
        }
        var failures = 0
        for _ in 0..<300 {
            do {
                let bus = try await Bus.connect(address: daemon.address, timeout: .seconds(2))
                await bus.close()
            } catch {
                failures += 1
            }
        }
        #expect(failures == 0)
    }
}
