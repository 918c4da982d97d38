import BlueZ
import DBus
import Foundation
import Simulator
import TestSupport
import Testing

/// The simulated bluetoothd's agents, Pair(), bonds and a dongle that lost
/// its keys (docs/pairing-research.md §1–§4), driven over a private
/// dbus-daemon with a small Agent1 exported on the test's own connection.
@Suite(.serialized) struct SimulatorPairingTests {
    static let device = SimulatorTests.device
    static let adapter = SimulatorTests.adapter
    static let manager: ObjectPath = "/org/bluez"
    static let agentManager = "org.bluez.AgentManager1"

    static let alreadyExists = DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists")
    static let authenticationFailed = DBusError.remote(
        name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed"
    )
    static let authenticationCanceled = DBusError.remote(
        name: "org.bluez.Error.AuthenticationCanceled", message: "Authentication Canceled"
    )
    static let notPaired = DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Not paired")
    static let doesNotExist = DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")

    // MARK: Helpers

    func register(_ f: SimulatorFixture, _ agent: TestAgent, capability: String) async throws {
        try await f.call(Self.manager, Self.agentManager, "RegisterAgent", [.objectPath(TestAgent.path), .string(capability)])
    }

    func pair(_ f: SimulatorFixture) async throws {
        try await f.call(Self.device, BlueZ.deviceInterface, "Pair")
    }

    func deviceProperties(_ f: SimulatorFixture) async throws -> [String: DBusValue] {
        try #require(try await f.managedObjects()[Self.device]?[BlueZ.deviceInterface])
    }

    func control(_ f: SimulatorFixture, _ method: String, _ arguments: [DBusValue] = []) async throws {
        _ = try await f.client.call(
            destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
            method: method, arguments
        )
    }

    // MARK: AgentManager1

    @Test func agentManagerRegistersOneAgentPerClient() async throws {
        try await withSimulator { f in
            let agent = try await TestAgent(on: f.client)
            #expect(try await f.managedObjects()[Self.manager]?[Self.agentManager] != nil, "bluetoothd lists /org/bluez")
            await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.invalidArguments, message: "Invalid arguments in method call")) {
                try await register(f, agent, capability: "Telepathy")
            }
            try await register(f, agent, capability: "")
            await #expect(throws: Self.alreadyExists) { try await register(f, agent, capability: "KeyboardOnly") }
            await #expect(throws: Self.doesNotExist) {
                try await f.call(Self.manager, Self.agentManager, "RequestDefaultAgent", [.objectPath("/elsewhere")])
            }
            try await f.call(Self.manager, Self.agentManager, "RequestDefaultAgent", [.objectPath(TestAgent.path)])
            await #expect(throws: Self.doesNotExist) {
                try await f.call(Self.manager, Self.agentManager, "UnregisterAgent", [.objectPath("/elsewhere")])
            }
            try await f.call(Self.manager, Self.agentManager, "UnregisterAgent", [.objectPath(TestAgent.path)])
            await #expect(throws: Self.doesNotExist) {
                try await f.call(Self.manager, Self.agentManager, "UnregisterAgent", [.objectPath(TestAgent.path)])
            }
            let registered = await f.simulator.events.filter { $0.kind == .agentRegistered }
            #expect(registered.first?.type == "KeyboardDisplay", "\"\" is KeyboardDisplay")
            #expect(registered.first?.on == true, "the first agent becomes the default")
        }
    }

    // MARK: Pair()

    @Test func justWorksPairConnectsFirstAndAnnouncesTheBondBeforeTheReply() async throws {
        try await withSimulator({ $0.pairing = .justWorks }) { f in
            let agent = try await TestAgent(on: f.client)
            try await register(f, agent, capability: "NoInputNoOutput")
            let signals = try await f.record()
            let reply = try await f.client.callMessage(
                destination: BlueZ.service, path: Self.device, interface: BlueZ.deviceInterface, method: "Pair",
                timeout: .seconds(10)
            )
            let all = await signals.messages
            let connected = try #require(all.first { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(true) })
            let paired = try #require(all.first { $0.propertiesChanged(on: Self.device)?["Paired"] == .boolean(true) })
            #expect(paired.propertiesChanged(on: Self.device)?["Bonded"] == .boolean(true))
            #expect(connected.serial < paired.serial && paired.serial < reply.serial, "Connected, then Paired, then the reply")
            #expect(await agent.calls.isEmpty, "Just Works during Pair() asks no agent")
            #expect(await f.simulator.isBonded)

            await #expect(throws: Self.alreadyExists) { try await pair(f) }
            // The link is encrypted: GATT works without any agent call.
            try await f.resolve()
            try await f.call(SimulatorTests.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            #expect(await agent.calls.isEmpty)
            #expect(await f.simulator.events.contains { $0.kind == .paired && $0.reason == "pair" && $0.type == "just-works" })
        }
    }

    @Test func pairWithoutAnyAgentFails() async throws {
        try await withSimulator({ $0.pairing = .justWorks }) { f in
            await #expect(throws: Self.authenticationFailed) { try await pair(f) }
            let device = try await deviceProperties(f)
            #expect(device["Paired"] == .boolean(false))
            #expect(await f.simulator.events.contains { $0.kind == .pairingFailed && $0.reason == "no-agent" })
        }
    }

    @Test func passkeyPairingWantsTheRightPasskeyFromAnAgentThatCanType() async throws {
        try await withSimulator({ $0.pairing = .passkey(123_456) }) { f in
            let agent = try await TestAgent(on: f.client, passkey: 654_321)
            try await register(f, agent, capability: "NoInputNoOutput")
            // SMP falls back to Just Works, which the dongle refuses.
            await #expect(throws: Self.authenticationFailed) { try await pair(f) }
            #expect(await agent.calls.isEmpty)
            try await f.call(Self.manager, Self.agentManager, "UnregisterAgent", [.objectPath(TestAgent.path)])

            try await register(f, agent, capability: "KeyboardDisplay")
            await #expect(throws: Self.authenticationFailed) { try await pair(f) }
            #expect(await agent.calls == ["RequestPasskey \(Self.device.rawValue)"])
            #expect(try await deviceProperties(f)["Paired"] == .boolean(false))

            await agent.answer(passkey: nil)  // an error reply
            await #expect(throws: Self.authenticationFailed) { try await pair(f) }

            await agent.answer(passkey: 123_456)
            try await pair(f)
            let device = try await deviceProperties(f)
            #expect(device["Paired"] == .boolean(true) && device["Bonded"] == .boolean(true))
            let reasons = await f.simulator.events.filter { $0.kind == .pairingFailed }.compactMap(\.reason)
            #expect(reasons == ["mitm-required", "wrong-passkey", "agent-rejected"])
        }
    }

    @Test func aLinkLostDuringPairingCancelsItAndTheAgentHearsCancel() async throws {
        try await withSimulator({ $0.pairing = .passkey(1) }) { f in
            let agent = try await TestAgent(on: f.client, passkey: 1, delay: .seconds(2))
            try await register(f, agent, capability: "KeyboardOnly")
            try await f.connectAndResolve()
            let simulator = f.simulator
            let drop = Task {
                _ = await eventually(timeout: .seconds(3)) { await !agent.calls.isEmpty }
                await simulator.dropLink(reason: "link-loss")
            }
            await #expect(throws: Self.authenticationCanceled) { try await pair(f) }
            await drop.value
            #expect(await eventually(timeout: .seconds(2)) { await agent.calls.contains("Cancel") })
            #expect(try await deviceProperties(f)["Paired"] == .boolean(false))
        }
    }

    @Test func anAgentThatNeverAnswersTimesOutAndGetsCancel() async throws {
        try await withSimulator({ $0.pairing = .passkey(1); $0.agentTimeout = .milliseconds(200) }) { f in
            let agent = try await TestAgent(on: f.client, passkey: 1, delay: .seconds(3))
            try await register(f, agent, capability: "KeyboardOnly")
            await #expect(throws: Self.authenticationFailed) { try await pair(f) }
            #expect(await eventually(timeout: .seconds(2)) { await agent.calls.contains("Cancel") })
            #expect(await f.simulator.events.contains { $0.kind == .pairingFailed && $0.reason == "agent-timeout" })
        }
    }

    // MARK: Encrypted characteristics

    @Test func startNotifyPairsThroughTheDefaultAgent() async throws {
        try await withSimulator({ $0.pairing = .justWorks; $0.notifyRate = 50 }) { f in
            let agent = try await TestAgent(on: f.client)
            try await register(f, agent, capability: "NoInputNoOutput")
            try await f.connectAndResolve()
            let signals = try await f.record()
            try await f.call(SimulatorTests.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            #expect(await agent.calls == ["RequestAuthorization \(Self.device.rawValue)"])
            let paired = try await signals.wait { $0.propertiesChanged(on: Self.device)?["Paired"] == .boolean(true) }
            #expect(paired.propertiesChanged(on: Self.device)?["Bonded"] == .boolean(true))
            try await signals.waitUntil { await $0.sequences(SimulatorTests.tx).count >= 3 }
            #expect(await f.simulator.events.contains { $0.kind == .paired && $0.reason == "security-elevation" })
        }
    }

    @Test func withoutADefaultAgentEncryptedRequestsAreNotPaired() async throws {
        try await withSimulator({ $0.pairing = .justWorks }) { f in
            try await f.connectAndResolve()
            let gatt = BlueZ.gattCharacteristicInterface
            await #expect(throws: Self.notPaired) { try await f.call(SimulatorTests.tx, gatt, "StartNotify") }
            await #expect(throws: Self.notPaired) { try await f.call(SimulatorTests.battery, gatt, "ReadValue", [.vardict([:])]) }
            await #expect(throws: Self.notPaired) {
                try await f.call(SimulatorTests.rx, gatt, "WriteValue", [.bytes([1]), .vardict(["type": .string("request")])])
            }
            // A write without response is never raised: the dongle drops it.
            try await f.call(SimulatorTests.rx, gatt, "WriteValue", [.bytes([2]), .vardict(["type": .string("command")])])
            #expect(await !f.simulator.events.contains { $0.kind == .write })

            // An agent that refuses is no better.
            let agent = try await TestAgent(on: f.client, authorize: false)
            try await register(f, agent, capability: "KeyboardDisplay")
            await #expect(throws: Self.notPaired) { try await f.call(SimulatorTests.tx, gatt, "StartNotify") }
            #expect(await agent.calls == ["RequestAuthorization \(Self.device.rawValue)"])
            #expect(try await deviceProperties(f)["Paired"] == .boolean(false))
        }
    }

    // MARK: Bonds

    @Test func theBondSurvivesABluetoothdRestartButAgentsDoNot() async throws {
        try await withSimulator({ $0.pairing = .passkey(42) }) { f in
            let agent = try await TestAgent(on: f.client, passkey: 42)
            try await register(f, agent, capability: "KeyboardDisplay")
            try await pair(f)
            try await f.client.setRemoteProperty(
                destination: BlueZ.service, path: Self.device, interface: BlueZ.deviceInterface, name: "Trusted",
                value: .boolean(true)
            )
            let signals = try await f.record(MatchRule(interface: StandardInterface.objectManager))
            await f.simulator.restart(after: .milliseconds(100))
            _ = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.device }
            let device = try await deviceProperties(f)
            #expect(device["Paired"] == .boolean(true))
            #expect(device["Bonded"] == .boolean(true))
            #expect(device["Trusted"] == .boolean(true))
            #expect(device["Connected"] == .boolean(false))
            await #expect(throws: Self.alreadyExists) { try await pair(f) }

            // No agent now (registering again works: the old one is gone),
            // yet the reconnect is encrypted with the stored key.
            try await register(f, agent, capability: "KeyboardDisplay")
            try await f.call(Self.manager, Self.agentManager, "UnregisterAgent", [.objectPath(TestAgent.path)])
            let callsBefore = await agent.calls.count
            try await f.connectAndResolve()
            try await f.call(SimulatorTests.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            _ = try await f.call(SimulatorTests.battery, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])])
            #expect(await agent.calls.count == callsBefore)
        }
    }

    @Test func aDongleThatForgotItsKeysFailsEveryConnectUntilTheDeviceIsRemoved() async throws {
        try await withSimulator({
            $0.pairing = .justWorks
            $0.disconnectedSignal = true
            $0.advertisingInterval = .milliseconds(30)
        }) { f in
            let agent = try await TestAgent(on: f.client)
            try await register(f, agent, capability: "NoInputNoOutput")
            try await pair(f)
            try await f.resolve()
            try await control(f, "ForgetKeys")
            // Nothing happens on the link that is up.
            try await f.call(SimulatorTests.tx, BlueZ.gattCharacteristicInterface, "StartNotify")
            try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")

            for _ in 0..<2 {
                let signals = try await f.record()
                await #expect(throws: DBusError.remote(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal)) {
                    try await f.call(Self.device, BlueZ.deviceInterface, "Connect")
                }
                let all = await signals.messages
                let device = all.compactMap { $0.propertiesChanged(on: Self.device) }
                #expect(device.compactMap { $0["Connected"] } == [.boolean(true), .boolean(false)])
                #expect(!device.contains { $0["ServicesResolved"] == .boolean(true) })
                let disconnected = try #require(all.first { $0.member == "Disconnected" && $0.path == Self.device })
                #expect(disconnected.body == [
                    .string("org.bluez.Reason.Authentication"),
                    .string("Connection terminated due to authentication failure"),
                ])
                let connected = try #require(all.first { $0.propertiesChanged(on: Self.device)?["Connected"] == .boolean(true) })
                #expect(connected.serial < disconnected.serial)
            }
            #expect(try await deviceProperties(f)["Paired"] == .boolean(true), "bluetoothd keeps its key")
            await #expect(throws: Self.alreadyExists) { try await pair(f) }
            let events = await f.simulator.events
            #expect(events.contains { $0.kind == .keysForgotten })
            #expect(events.filter { $0.kind == .bondRejected }.count == 2)

            // RemoveDevice, discover, Connect and Pair again: it works.
            let signals = try await f.record()
            try await f.call(Self.adapter, BlueZ.adapterInterface, "RemoveDevice", [.objectPath(Self.device)])
            _ = try await signals.wait { $0.member == "InterfacesRemoved" && $0.body.first?.objectPath == Self.device }
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StartDiscovery")
            let added = try await signals.wait { $0.member == "InterfacesAdded" && $0.body.first?.objectPath == Self.device }
            let fresh = added.body.last?.stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary
            #expect(fresh?["Paired"]?.bool == false)
            try await f.call(Self.adapter, BlueZ.adapterInterface, "StopDiscovery")
            try await f.connectAndResolve()
            try await pair(f)
            try await f.call(SimulatorTests.battery, BlueZ.gattCharacteristicInterface, "ReadValue", [.vardict([:])])
            try await f.call(Self.device, BlueZ.deviceInterface, "Disconnect")
            try await f.connectAndResolve()
            #expect(try await deviceProperties(f)["Bonded"] == .boolean(true))
        }
    }

    @Test func pairingParsesTheCommandLinesForms() throws {
        #expect(try DonglePairing(parsing: "none") == .none)
        #expect(try DonglePairing(parsing: "just-works") == .justWorks)
        #expect(try DonglePairing(parsing: "passkey=012345") == .passkey(12_345))
        #expect(DonglePairing.passkey(42).description == "passkey=000042")
        for bad in ["", "passkey=", "passkey=1234567", "passkey=12a456", "justworks", "passkey=-1"] {
            #expect(throws: DonglePairingError(text: bad)) { try DonglePairing(parsing: bad) }
        }
    }
}

// MARK: - A test agent

/// Agent1 at `TestAgent.path` on a client connection: answers RequestPasskey
/// with its passkey (an error reply when it has none), RequestAuthorization
/// with an empty reply (or an error when told not to authorize), after
/// `delay`; records every call, `Cancel` included.
final class TestAgent: Sendable {
    static let path: ObjectPath = "/io/tether/test/agent"

    actor State {
        var calls: [String] = []
        var passkey: UInt32?
        let authorize: Bool

        init(passkey: UInt32?, authorize: Bool) {
            self.passkey = passkey
            self.authorize = authorize
        }

        func record(_ call: String) { calls.append(call) }
        func setPasskey(_ value: UInt32?) { passkey = value }
    }

    let state: State

    init(on bus: Bus, passkey: UInt32? = nil, authorize: Bool = true, delay: Duration = .zero) async throws {
        let state = State(passkey: passkey, authorize: authorize)
        self.state = state
        let rejected = DBusError.remote(name: "org.bluez.Error.Rejected", message: "Rejected by the test")
        try await bus.export(Self.path, [ExportedInterface(
            name: "org.bluez.Agent1",
            methods: [
                "RequestPasskey": .init(in: "o", out: "u") { call in
                    await state.record("RequestPasskey \(try call.argument(0).objectPath?.rawValue ?? "?")")
                    if delay > .zero { try await Task.sleep(for: delay) }
                    guard let passkey = await state.passkey else { throw rejected }
                    return [.uint32(passkey)]
                },
                "RequestAuthorization": .init(in: "o") { call in
                    await state.record("RequestAuthorization \(try call.argument(0).objectPath?.rawValue ?? "?")")
                    if delay > .zero { try await Task.sleep(for: delay) }
                    guard state.authorize else { throw rejected }
                    return []
                },
                "Cancel": .init { _ in
                    await state.record("Cancel")
                    return []
                },
                "Release": .init { _ in [] },
            ]
        )])
    }

    var calls: [String] { get async { await state.calls } }

    func answer(passkey: UInt32?) async { await state.setPasskey(passkey) }
}
