import BlueZ
import Configuration
@testable import DBus
import EventLoop
import Logging
import Testing
import TestSupport
@testable import TetherDaemon

/// Tether's Agent1, called directly: only bluetoothd (org.bluez's current
/// owner, as dbus-daemon stamps the sender) is answered; with a passkey
/// configured no Just Works prompt is accepted; only the configured
/// dongle's object gets an answer.
@Suite struct PairingAgentTests {
    static let bluez = ":1.7"
    static let dongle: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"
    static let other: ObjectPath = "/org/bluez/hci0/dev_11_22_33_44_55_66"

    static func agent(_ pairing: TetherConfig.Pairing, address: String? = "AA:BB:CC:DD:EE:FF") -> (PairingAgent, LogCapture) {
        let capture = LogCapture()
        let logger = Logger(label: "agent-test") { _ in CapturingLogHandler(capture: capture) }
        let agent = PairingAgent(pairing: pairing, passkey: Passkey(4_321), address: address, logger: logger)
        agent.setBluezOwner(bluez)
        agent.setDongle(dongle)
        return (agent, capture)
    }

    static let passkey = TetherConfig.Pairing.passkey(.file("/etc/tether/passkey"))

    /// The D-Bus error name a call got, nil if it was answered.
    static func call(
        _ agent: PairingAgent, _ method: String, sender: String = bluez, _ arguments: [DBusValue]
    ) async -> (reply: [DBusValue]?, error: String?) {
        guard let handler = agent.interface.methods[method]?.handler else { return (nil, "no such method") }
        let message = Message(kind: .methodCall, sender: sender, path: PairingAgent.path, interface: BlueZ.agentInterface, member: method, body: arguments)
        do {
            return (try await handler(MethodCall(message: message)), nil)
        } catch let error as DBusError {
            if case .remote(let name, _) = error { return (nil, name) }
            return (nil, "\(error)")
        } catch {
            return (nil, "\(error)")
        }
    }

    @Test func bluetoothdGetsThePasskeyForTheDongle() async throws {
        let (agent, _) = Self.agent(Self.passkey)
        agent.pairingStarted(Self.dongle)
        #expect(!agent.passkeyGiven(Self.dongle))
        let answer = await Self.call(agent, "RequestPasskey", [.objectPath(Self.dongle)])
        #expect(answer.reply == [.uint32(4_321)])
        #expect(agent.passkeyGiven(Self.dongle))
        agent.pairingStarted(Self.dongle)
        #expect(!agent.passkeyGiven(Self.dongle), "a new pairing starts without it")
    }

    @Test(arguments: [":1.99", "", "org.bluez"])
    func aCallerOtherThanOrgBluezsOwnerIsRefusedWithoutThePasskey(_ sender: String) async {
        let (agent, capture) = Self.agent(Self.passkey)
        for method in ["RequestPasskey", "RequestAuthorization", "DisplayPasskey", "Cancel", "Release"] {
            let arguments: [DBusValue] = switch method {
            case "DisplayPasskey": [.objectPath(Self.dongle), .uint32(1), .uint16(0)]
            case "Cancel", "Release": []
            default: [.objectPath(Self.dongle)]
            }
            let answer = await Self.call(agent, method, sender: sender, arguments)
            #expect(answer.reply == nil && answer.error == BlueZ.ErrorName.notAuthorized, "\(method): \(answer)")
        }
        #expect(!agent.passkeyGiven(Self.dongle))
        // Five refused calls, one line, at warning level, naming the sender.
        let lines = capture.all.filter { $0.contains("not bluetoothd") }
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.hasPrefix("warning ") == true, "\(lines)")
        #expect(lines.first?.contains(sender.isEmpty ? "an unnamed sender" : sender) == true, "\(lines)")
    }

    @Test func whileBluetoothdIsAwayNobodyIsAnswered() async {
        let (agent, _) = Self.agent(Self.passkey)
        agent.setBluezOwner(nil)
        let answer = await Self.call(agent, "RequestPasskey", [.objectPath(Self.dongle)])
        #expect(answer.error == BlueZ.ErrorName.notAuthorized)
        // bluetoothd back under a new name: the old one is nobody.
        agent.setBluezOwner(":1.8")
        #expect(await Self.call(agent, "RequestPasskey", [.objectPath(Self.dongle)]).error == BlueZ.ErrorName.notAuthorized)
        #expect(await Self.call(agent, "RequestPasskey", sender: ":1.8", [.objectPath(Self.dongle)]).reply == [.uint32(4_321)])
    }

    @Test func refusedCallsAreToldOnceAMinute() {
        var calls = ForeignCalls()
        let start = MonotonicInstant(nanoseconds: 1_000_000_000)
        #expect(calls.record(at: start) == 0)
        #expect(calls.record(at: start + .seconds(1)) == -1)
        #expect(calls.record(at: start + .seconds(59)) == -1)
        #expect(calls.record(at: start + .seconds(61)) == 2, "the next line counts the calls left untold")
        #expect(calls.record(at: start + .seconds(62)) == -1)
    }

    /// passkey-file: a Just Works prompt (RequestAuthorization, the
    /// kernel's; RequestConfirmation) is refused even for the dongle.
    @Test(arguments: ["RequestAuthorization", "RequestConfirmation"])
    func withAPasskeyJustWorksPromptsAreRejected(_ method: String) async {
        let (agent, _) = Self.agent(Self.passkey)
        let arguments: [DBusValue] = method == "RequestConfirmation" ? [.objectPath(Self.dongle), .uint32(123_456)] : [.objectPath(Self.dongle)]
        #expect(await Self.call(agent, method, arguments).error == BlueZ.ErrorName.rejected)
        // With pairing = "just-works" the dongle's are accepted.
        let (justWorks, _) = Self.agent(.justWorks)
        #expect(await Self.call(justWorks, method, arguments).reply == [])
    }

    @Test func onlyTheConfiguredDonglesObjectIsAnswered() async {
        let (agent, _) = Self.agent(Self.passkey)
        #expect(await Self.call(agent, "RequestPasskey", [.objectPath(Self.other)]).error == BlueZ.ErrorName.rejected)
        #expect(await Self.call(agent, "DisplayPasskey", [.objectPath(Self.other), .uint32(1), .uint16(0)]).error == BlueZ.ErrorName.rejected)
        #expect(await Self.call(agent, "DisplayPasskey", [.objectPath(Self.dongle), .uint32(1), .uint16(0)]).reply == [])
        // The resolved object must also carry dongle.address.
        agent.setDongle(Self.other)
        #expect(await Self.call(agent, "RequestPasskey", [.objectPath(Self.other)]).error == BlueZ.ErrorName.rejected)
        #expect(!agent.passkeyGiven(Self.other))
        agent.setDongle(nil)
        #expect(await Self.call(agent, "RequestPasskey", [.objectPath(Self.dongle)]).error == BlueZ.ErrorName.rejected)
    }
}
