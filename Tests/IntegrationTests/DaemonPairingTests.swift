import Configuration
import DBus
import EventLoop
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LinkSupervisor
import Simulator
import TestSupport
import Testing
@testable import TetherDaemon

/// `dongle.pairing` against the simulator's pairing (its dongle needs an
/// encrypted link): Tether's agent, Pair before subscribing, a bond that
/// outlives restarts, a wrong passkey, and a dongle that lost its keys.
/// Figures ("figure:" lines) go to docs/operations.md.
@Suite(.serialized) struct DaemonPairingTests {
    static func pairings(_ harness: DaemonHarness) -> Int {
        harness.events().filter { $0.ev == "paired" }.count
    }

    static func lines(_ harness: DaemonHarness, _ fragment: String) -> [String] {
        harness.logLines.all.filter { $0.contains(fragment) }
    }

    @Test func justWorksPairsOnceTrustsAndTheBondOutlivesRestarts() async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        let harness = try await DaemonHarness(simulator: options) { $0.dongle.pairing = .justWorks }
        let start = ContinuousClock.now
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        print("figure: just-works pairing, start to online \(FieldFaultTests.seconds(start, .now)) s")
        #expect(Self.pairings(harness) == 1)
        #expect(await harness.simulator.isBonded)
        #expect(await harness.simulator.isTrusted)
        _ = await eventually(timeout: .seconds(2)) { !Self.lines(harness, "event=paired").isEmpty }
        #expect(Self.lines(harness, "event=paired").first?.contains("method=just-works") == true)
        #expect(!Self.lines(harness, "event=agent-registered").isEmpty)

        // Tether restarts: the bond is bluetoothd's, no second pairing.
        await harness.stopDaemon()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        // bluetoothd restarts: agents die with it, bonds do not.
        await harness.simulator.crash(restartAfter: .milliseconds(300))
        #expect(await eventually { harness.events().contains { $0.ev == "restarted" } })
        #expect(await harness.waitForState(.online, within: .seconds(15)))
        #expect(Self.pairings(harness) == 1, "the bond held across both restarts")
        let records = try harness.records().filter { $0.source == "notify" }
        await harness.stop()
        #expect(!records.isEmpty)
    }

    static func passkeyFile(_ harness: DaemonHarness, _ passkey: String) throws -> String {
        let path = harness.directory.path + "/passkey"
        try Data((passkey + "\n").utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        return path
    }

    @Test func thePasskeyFromTheFileIsGivenAndReadingsFlow() async throws {
        var options = SimulatorOptions()
        options.pairing = .passkey(4_321)
        let harness = try await DaemonHarness(simulator: options)
        let file = try Self.passkeyFile(harness, "004321")
        harness.config.dongle.pairing = .passkey(.file(file))
        harness.passkey = try harness.config.loadPasskey(euid: geteuid(), environment: [:])
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(Self.pairings(harness) == 1)
        #expect(Self.lines(harness, "event=paired").first?.contains("method=passkey") == true)
        await harness.stop()
    }

    /// The system bus is everyone's: a local process calling Tether's agent
    /// (on the daemon's unique name) is refused without the passkey, and
    /// told once in the journal with its name, not once per call.
    @Test func theAgentAnswersNobodyButBluetoothd() async throws {
        var options = SimulatorOptions()
        options.pairing = .passkey(4_321)
        let harness = try await DaemonHarness(simulator: options)
        let file = try Self.passkeyFile(harness, "004321")
        harness.config.dongle.pairing = .passkey(.file(file))
        harness.passkey = try harness.config.loadPasskey(euid: geteuid(), environment: [:])
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let daemon = try #require(await harness.daemonUniqueName())
        let intruder = try await Bus.connect(address: harness.busDaemon.address, on: EventLoop(name: "intruder"))
        let me = await intruder.uniqueName
        let device: DBusValue = .objectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF")
        for method in ["RequestPasskey", "RequestPasskey", "RequestAuthorization", "Release"] {
            let arguments = method == "Release" ? [] : [device]
            do {
                let reply = try await intruder.call(
                    destination: daemon, path: "/io/tether/Agent", interface: "org.bluez.Agent1", method: method, arguments)
                Issue.record("\(method) answered a stranger: \(reply)")
            } catch {
                guard case .remote(let name, _) = error else { Issue.record("\(method): \(error)"); continue }
                #expect(name == "org.bluez.Error.NotAuthorized", "\(method): \(name)")
            }
        }
        let refused = Self.lines(harness, "not bluetoothd")
        let given = Self.lines(harness, "giving bluetoothd the passkey")
        await intruder.close()
        await harness.stop()
        #expect(refused.count == 1, "one line for four calls: \(refused)")
        #expect(refused.first?.hasPrefix("warning ") == true, "\(refused)")
        #expect(refused.first?.contains(me) == true, "names the sender \(me): \(refused)")
        #expect(given.count == 1, "the passkey went to bluetoothd's one pairing only: \(given)")
    }

    /// A dongle that pairs Just Works where a passkey is configured (no
    /// keyboard nor display on it: bluetoothd accepts Just Works for Pair's
    /// caller without asking the agent) holds an unauthenticated bond:
    /// refused, removed, reported, and no reading taken from it.
    @Test func justWorksWhereAPasskeyIsConfiguredIsRefusedAndTheBondRemoved() async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        let harness = try await DaemonHarness(simulator: options)
        let file = try Self.passkeyFile(harness, "004321")
        harness.config.dongle.pairing = .passkey(.file(file))
        harness.config.reconnect.cooldown = .seconds(30)
        harness.passkey = try harness.config.loadPasskey(euid: geteuid(), environment: [:])
        try await harness.startDaemon()
        #expect(await harness.waitForState(.coolingDown, within: .seconds(10)))
        #expect(await eventually(timeout: .seconds(5)) { await !harness.simulator.isPaired })
        try await Task.sleep(for: .seconds(1))
        let status = try #require(harness.service?.status)
        let refusals = Self.lines(harness, "unauthenticated=true")
        let records = (try? harness.records().filter { $0.source == "notify" }) ?? []
        await harness.stop()
        #expect(refusals.count == 1, "\(refusals)")
        #expect(refusals.first?.hasPrefix("error ") == true, "\(refusals)")
        #expect(Self.pairings(harness) == 0)
        #expect(status.lastError?.contains("without asking for the passkey") == true, "\(status.lastError ?? "-")")
        #expect(status.bondProblem?.contains("Just Works") == true, "\(status.bondProblem ?? "-")")
        #expect(records.isEmpty, "no reading from an unauthenticated link: \(records.count)")
    }

    @Test func aWrongPasskeyFailsClearlyAndDoesNotLoop() async throws {
        var options = SimulatorOptions()
        options.pairing = .passkey(4_321)
        let harness = try await DaemonHarness(simulator: options)
        let file = try Self.passkeyFile(harness, "111111")
        harness.config.dongle.pairing = .passkey(.file(file))
        harness.passkey = try harness.config.loadPasskey(euid: geteuid(), environment: [:])
        harness.config.reconnect.cooldown = .seconds(30)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.coolingDown, within: .seconds(10)))
        try await Task.sleep(for: .seconds(3))
        let failures = harness.events().filter { $0.ev == "pairing-failed" }.count
        let status = try #require(harness.service?.status)
        await harness.stop()
        #expect(failures == 1, "one refused pairing, then cooling down: \(failures)")
        #expect(status.lastError?.contains("AuthenticationFailed") == true, "\(status.lastError ?? "-")")
        #expect(status.lastError?.contains(file) == true, "names the passkey file: \(status.lastError ?? "-")")
    }

    @Test func withoutPairingAnEncryptedDongleSaysWhatToSet() async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await eventually(timeout: .seconds(10)) {
            harness.service?.status.lastError?.contains("dongle.pairing") == true
        })
        let state = harness.state
        await harness.stop()
        #expect(state != .online)
    }

    /// The dongle forgets its keys and drops the link: every connect comes
    /// up and drops. With the kernel's reason (here BlueZ ≥ 5.83's
    /// Disconnected signal) or without any (5.66 over D-Bus alone), Tether
    /// removes the bond, pairs again once and reads again.
    @Test(arguments: [true, false])
    func aDongleThatLostItsKeysIsPairedAgainOnce(reasonHeard: Bool) async throws {
        var options = SimulatorOptions()
        options.pairing = .justWorks
        options.disconnectedSignal = reasonHeard
        let harness = try await DaemonHarness(simulator: options) {
            $0.dongle.pairing = .justWorks
            $0.reconnect.window = .seconds(20)
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.forgetKeys()
        let dropped = ContinuousClock.now
        await harness.simulator.dropLink(reason: "remote")
        #expect(await eventually(timeout: .seconds(15)) { !Self.lines(harness, "event=bond-lost").isEmpty })
        let detected = ContinuousClock.now
        #expect(await eventually(timeout: .seconds(20)) { Self.pairings(harness) == 2 })
        let repaired = ContinuousClock.now
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        let online = ContinuousClock.now
        let lost = Self.lines(harness, "event=bond-lost")
        print("figure: bond lost (\(reasonHeard ? "reason heard" : "D-Bus only")): detected \(FieldFaultTests.seconds(dropped, detected)) s, paired again \(FieldFaultTests.seconds(dropped, repaired)) s, online \(FieldFaultTests.seconds(dropped, online)) s after the drop")
        await harness.stop()
        #expect(lost.count == 1, "\(lost)")
        #expect(lost.first?.contains("repairing=true") == true)
    }
}
