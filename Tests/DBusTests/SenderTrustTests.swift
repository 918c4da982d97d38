import DBus
import Foundation
import TestSupport
import Testing

/// Only the bus driver speaks for the bus, only a name's current owner for
/// the name: a signal is believed from its stamped sender, never from the
/// bus daemon's routing (a signal addressed to a connection reaches it
/// whatever its rules say) or from what a signal says of itself.
@Suite struct MatchRuleSenderTests {
    private func signal(
        from sender: String?, interface: String = "org.example.Tick", member: String = "Tick",
        path: ObjectPath = "/org/example", signature: String = "", body: [DBusValue] = []
    ) -> Message {
        Message(kind: .signal, sender: sender, path: path, interface: interface, member: member, signature: signature, body: body)
    }

    @Test func theBusDriversRuleTakesOnlyTheBusDriver() {
        let rule = MatchRule(sender: "org.freedesktop.DBus", interface: "org.example.Tick")
        #expect(rule.trustedSender == .busDriver)
        #expect(rule.matches(signal(from: "org.freedesktop.DBus")))
        #expect(!rule.matches(signal(from: ":1.7")))
        #expect(!rule.matches(signal(from: nil)))
    }

    @Test func aWellKnownSenderIsItsCurrentOwnerOnly() {
        let rule = MatchRule(sender: "org.bluez", interface: "org.example.Tick")
        #expect(rule.trustedSender == .ownerOf("org.bluez"))
        let owners = ["org.bluez": ":1.3"]
        #expect(rule.matches(signal(from: ":1.3")) { owners[$0] })
        #expect(!rule.matches(signal(from: ":1.9")) { owners[$0] })
        // A signal stamped with the well-known name itself cannot come from a
        // client (dbus-daemon stamps unique names), and an unknown owner admits nothing.
        #expect(!rule.matches(signal(from: "org.bluez")) { owners[$0] })
        #expect(!rule.matches(signal(from: ":1.3")) { _ in nil })
    }

    @Test func aUniqueSenderIsThatConnectionOnly() {
        let rule = MatchRule(sender: ":1.5")
        #expect(rule.matches(signal(from: ":1.5")))
        #expect(!rule.matches(signal(from: ":1.50")))
    }

    @Test func signatureAndFirstArgumentAreChecked() {
        let rule = MatchRule(sender: "org.freedesktop.DBus", member: "NameOwnerChanged", arg0: "org.bluez", signature: "sss")
        let genuine = signal(
            from: "org.freedesktop.DBus", member: "NameOwnerChanged", signature: "sss",
            body: [.string("org.bluez"), .string(":1.3"), .string("")]
        )
        #expect(rule.matches(genuine))
        var otherName = genuine
        otherName.body[0] = .string("org.bluez.x")
        #expect(!rule.matches(otherName))
        var otherShape = genuine
        otherShape.signature = "ssi"
        #expect(!rule.matches(otherShape))
        // The signature key is Tether's own: dbus-daemon's rule text has none.
        #expect(!rule.description.contains("sss"))
    }

    @Test func aPathNamespaceTakesItselfAndBelowOnly() {
        let rule = MatchRule(pathNamespace: "/org/bluez")
        #expect(rule.matches(signal(from: ":1.1", path: "/org/bluez")))
        #expect(rule.matches(signal(from: ":1.1", path: "/org/bluez/hci0")))
        #expect(!rule.matches(signal(from: ":1.1", path: "/org/bluezz")))
    }
}

/// The same rules over a real dbus-daemon, with a second, unrelated client
/// forging signals to the victim's unique name (unicast: dbus-daemon delivers
/// them whatever the victim's match rules say).
@Suite struct ForgedSignalTests {
    let directory: TemporaryDirectory
    let daemon: BusDaemonProcess

    init() throws {
        directory = try TemporaryDirectory("dbus-forged")
        daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
    }

    private func withBuses(_ count: Int, _ body: ([Bus]) async throws -> Void) async throws {
        var buses: [Bus] = []
        for _ in 0..<count { buses.append(try await Bus.connect(address: daemon.address)) }
        defer { daemon.stop(); directory.remove() }
        do {
            try await body(buses)
        } catch {
            for bus in buses { await bus.close() }
            throw error
        }
        for bus in buses { await bus.close() }
    }

    /// Waits until `bus` has handed over every signal dbus-daemon routed to
    /// it so far: a round trip to the bus driver is answered after them.
    private func settle(_ bus: Bus) async throws {
        _ = try await bus.nameOwner(of: "org.freedesktop.DBus")
    }

    @Test func aForgedNameOwnerChangedIsDroppedAndARealOneIsSeen() async throws {
        try await withBuses(3) { buses in
            let (victim, attacker, service) = (buses[0], buses[1], buses[2])
            let changes = try await victim.nameOwnerChanges(of: "org.example.Service")
            var iterator = changes.makeAsyncIterator()
            #expect(await iterator.next() == .some(nil))
            let victimName = await victim.uniqueName
            let attackerName = await attacker.uniqueName
            // "org.example.Service is mine", then "it is gone": to the victim alone, and to everyone.
            for destination in [victimName, nil] {
                try await attacker.emit(
                    path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    [.string("org.example.Service"), .string(""), .string(attackerName)], destination: destination
                )
            }
            try await settle(attacker)
            try await service.requestName("org.example.Service")
            let serviceName = await service.uniqueName
            // The first change the victim believes is the real one.
            #expect(await iterator.next() == .some(serviceName))
            let drops = victim.unreadDrops
            #expect(drops.signals >= 2)
        }
    }

    @Test func aWellKnownNamesSignalsAreBelievedOnlyFromItsCurrentOwner() async throws {
        try await withBuses(4) { buses in
            let (victim, attacker, service, successor) = (buses[0], buses[1], buses[2], buses[3])
            try await service.requestName("org.example.Service")
            let received = try await victim.signals(
                matching: MatchRule(sender: "org.example.Service", interface: "org.example.Tick", member: "Tick", signature: "s")
            )
            var iterator = received.makeAsyncIterator()
            let victimName = await victim.uniqueName
            let attackerName = await attacker.uniqueName
            func tick(_ bus: Bus, _ text: String, to destination: String? = nil) async throws {
                try await bus.emit(path: "/org/example", interface: "org.example.Tick", member: "Tick", [.string(text)], destination: destination)
            }
            // The attacker claims the name, then sends as if it were the service.
            try await attacker.emit(
                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                [.string("org.example.Service"), .string(await service.uniqueName), .string(attackerName)],
                destination: victimName
            )
            try await tick(attacker, "forged, unicast", to: victimName)
            try await tick(attacker, "forged, broadcast")
            try await settle(attacker)
            try await tick(service, "genuine")
            #expect(await iterator.next()?.body.first?.string == "genuine")

            // The name changes hands for real: the new owner is believed, the old one no longer.
            try await service.releaseName("org.example.Service")
            try await successor.requestName("org.example.Service")
            try await settle(successor)
            try await tick(service, "old owner")
            try await settle(service)
            try await tick(successor, "new owner")
            #expect(await iterator.next()?.body.first?.string == "new owner")
        }
    }

    /// A misshapen signal from the right sender is dropped before decoding too.
    @Test func aSignalOfTheWrongShapeIsDroppedUnread() async throws {
        try await withBuses(2) { buses in
            let (victim, service) = (buses[0], buses[1])
            let serviceName = await service.uniqueName
            let received = try await victim.signals(
                matching: MatchRule(sender: serviceName, interface: "org.example.Tick", member: "Tick", signature: "s")
            )
            var iterator = received.makeAsyncIterator()
            let before = victim.unreadDrops.signals
            try await service.emit(
                path: "/org/example", interface: "org.example.Tick", member: "Tick", [.bytes(Array(repeating: 7, count: 1 << 20))]
            )
            try await service.emit(path: "/org/example", interface: "org.example.Tick", member: "Tick", [.string("fits")])
            #expect(await iterator.next()?.body.first?.string == "fits")
            #expect(victim.unreadDrops.signals == before + 1)
        }
    }

    /// Calls nothing here serves are answered from their header; a caller
    /// gets a bounded number of handlers running at once.
    @Test func callsAreRefusedFromTheirHeaderAndBoundedPerCaller() async throws {
        try await withBuses(3) { buses in
            let (server, caller, other) = (buses[0], buses[1], buses[2])
            try await server.export("/org/example", [
                ExportedInterface(name: "org.example.Slow", methods: [
                    "Wait": .init(in: "u") { _ in try? await Task.sleep(for: .seconds(2)); return [] },
                ])
            ])
            let name = await server.uniqueName
            let big = DBusValue.bytes(Array(repeating: 1, count: 4 << 20))
            await #expect(throws: DBusError.remote(
                name: DBusErrorName.unknownMethod,
                message: #"Method "Nothing" with signature "ay" on interface "org.example.Slow" doesn't exist"#
            )) {
                _ = try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Nothing", [big])
            }
            await #expect(throws: DBusError.remote(name: DBusErrorName.invalidArgs, message: #"Expected signature "u", got "ay""#)) {
                _ = try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [big])
            }
            #expect(server.unreadDrops.calls == 2)

            // Four at once are served; the fifth from the same caller is refused at once; another caller is served.
            let waits = (0..<Bus.defaultCallsInFlightPerCaller).map { _ in
                Task { () async throws(DBusError) -> [DBusValue] in
                    try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [.uint32(1)])
                }
            }
            try await Task.sleep(for: .milliseconds(300))
            let started = ContinuousClock.now
            do throws(DBusError) {
                _ = try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [.uint32(1)])
                Issue.record("a fifth call in flight was served")
            } catch {
                #expect(error.name == DBusErrorName.limitsExceeded)
            }
            #expect(started.duration(to: .now) < .seconds(1))
            _ = try await other.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [.uint32(1)])
            for wait in waits { _ = try await wait.value }
            // Their replies free the caller's slots.
            _ = try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [.uint32(1)])

            // A service that sets a higher bound (the simulated bluetoothd) serves the fifth.
            await server.limitCallsInFlight(perCaller: Bus.defaultCallsInFlightPerCaller + 1)
            let more = (0...Bus.defaultCallsInFlightPerCaller).map { _ in
                Task { () async throws(DBusError) -> [DBusValue] in
                    try await caller.call(destination: name, path: "/org/example", interface: "org.example.Slow", method: "Wait", [.uint32(1)])
                }
            }
            for wait in more { _ = try await wait.value }
        }
    }
}
