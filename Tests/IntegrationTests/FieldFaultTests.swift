import BlueZ
import Configuration
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing
@testable import TetherDaemon

/// The faults gateways meet beyond a dropped link (issue 19), against the
/// simulator: a hung dongle application, a changed GATT database, a stale
/// device object, a renumbered controller, and why links drop. Each prints
/// its figures ("figure:" lines) for docs/operations.md, "When things go wrong".
@Suite(.serialized) struct FieldFaultTests {
    /// Seconds from `from` to `to`, for figures.
    static func seconds(_ from: ContinuousClock.Instant, _ to: ContinuousClock.Instant) -> String {
        String(format: "%.2f", Double((to - from).components.attoseconds) / 1e18 + Double((to - from).components.seconds))
    }

    /// The shipped example config, pointed at the test's readings directory.
    static func shippedConfig(readings: String) throws -> TetherConfig {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/tether.toml")
        var config = try TetherConfig.load(path: example.path)
        config.readings.directory = readings
        return config
    }

    @Test func aHungApplicationIsCaughtWithTheShippedConfigAndReadingsResumeWhenItRecovers() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 1  // the slowest dongle the shipped limit promises to catch within 30 s
        var readings = ""
        let harness = try await DaemonHarness(simulator: options) { readings = $0.readings.directory }
        harness.config = try Self.shippedConfig(readings: readings)
        #expect(harness.config.silenceLimit == .seconds(20))
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .seconds(2))
        await harness.simulator.hangApplication(attAnswers: true)
        let hung = ContinuousClock.now
        // The last notification went out at most 1 s before the hang.
        #expect(await eventually(timeout: .seconds(30)) { harness.state != .online })
        let left = ContinuousClock.now
        let status = try #require(harness.service?.status)
        #expect(status.silenceEvents == 1)
        #expect(status.lastError?.contains("no notification for") == true, "\(status.lastError ?? "-")")
        // The state is published before the turn's reports are logged: wait for the line.
        _ = await eventually(timeout: .seconds(2)) { harness.logLines.all.contains { $0.contains("event=silence") } }
        let line = harness.logLines.all.first { $0.contains("event=silence") }
        #expect(line?.contains("silence_limit=20.000") == true, "\(line ?? "no silence line")")
        #expect(status.summary().contains("online") == false || status.state != .online)
        // The link is dropped with Device1.Disconnect, and the hung dongle taken back.
        #expect(await eventually(timeout: .seconds(10)) { harness.events().contains { $0.ev == "disconnect-request" && $0.t > 0 } })
        #expect(await harness.waitForState(.waitingForData, within: .seconds(15)))
        // The application comes back: readings within 5 s, online again.
        let before = try harness.sequencesOnDisk().count
        await harness.simulator.resumeApplication()
        let resumed = ContinuousClock.now
        #expect(await eventually(timeout: .seconds(5)) { ((try? harness.sequencesOnDisk().count) ?? 0) > before })
        let reading = ContinuousClock.now
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        print("figure: hung application (1 notification/s, shipped config): left online \(Self.seconds(hung, left)) s after the hang; a reading on disk \(Self.seconds(resumed, reading)) s after it recovered")
        let onDisk = try harness.sequencesOnDisk()
        await harness.stop()
        #expect(onDisk.count == Set(onDisk).count, "no reading twice")
    }

    @Test func aHungDongleThatNeverRecoversEscalatesAndCoolsDownWithinItsWindow() async throws {
        let harness = try await DaemonHarness {
            $0.dongle.silenceLimit = .after(.seconds(2))
            $0.reconnect.window = .seconds(8)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.cooldown = .seconds(30)
            $0.reconnect.escalate = [.powerCycle]
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.hangApplication(attAnswers: true)
        #expect(await harness.waitForState(.coolingDown, within: .seconds(25)))
        let log = harness.logLines.all
        let silences = log.filter { $0.contains("event=silence") }.count
        let attempts = harness.events().filter { $0.ev == "connect-request" }.count
        await harness.stop()
        print("figure: a dongle hung for good: \(silences) silence events, \(attempts) connects, then escalation and cooling down")
        // The bound: the silence that ended the online session, one per attempt of the
        // window (3), and one for the attempt after each escalation step (1).
        #expect(silences >= 2 && silences <= 1 + 3 + 1, "\(silences)")
        #expect(log.contains { $0.contains("event=window-exhausted") })
        #expect(log.contains { $0.contains("power-cycle") })
    }

    @Test func aStopWhileSilentReportsNoSilence() async throws {
        let harness = try await DaemonHarness { $0.dongle.silenceLimit = .after(.seconds(3)) }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.hangApplication(attAnswers: true)
        try await Task.sleep(for: .seconds(1))
        await harness.stopDaemon()
        try await Task.sleep(for: .seconds(3))
        let log = harness.logLines.all
        await harness.stop()
        #expect(!log.contains { $0.contains("event=silence") })
    }

    @Test func withoutASourceTheReasonIsUnavailableNeverGuessed() async throws {
        let harness = try await DaemonHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.dropLink(reason: "remote")
        #expect(await eventually { harness.logLines.all.contains { $0.contains("event=disconnected") } })
        let line = harness.logLines.all.first { $0.contains("event=disconnected") } ?? ""
        await harness.stop()
        #expect(line.contains("reason=unavailable"), "\(line)")
        #expect(line.contains("reason unavailable"), "\(line)")
    }

    @Test func aGattLayoutChangedWhileConnectedIsSubscribedAgainWithoutADrop() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(500))
        let before = try harness.sequencesOnDisk().count
        let changed = ContinuousClock.now
        await harness.simulator.changeGattLayout()
        #expect(await eventually(timeout: .seconds(5)) { ((try? harness.sequencesOnDisk().count) ?? 0) > before + 10 })
        let flowing = ContinuousClock.now
        #expect(await harness.waitForState(.online))
        let (events, _, onDisk, log) = try await harness.quiesceAndStop().parts
        print("figure: GATT layout changed while connected: readings again \(Self.seconds(changed, flowing)) s later")
        #expect(log.contains { $0.contains("event=gatt-changed") })
        #expect(events.contains { $0.ev == "gatt-objects-replaced" && $0.reason == "service-changed" })
        #expect(!events.contains { $0.ev == "disconnected" }, "the link stayed")
        #expect(onDisk.count == Set(onDisk).count, "no reading twice")
        #expect(onDisk == onDisk.sorted())
    }

    @Test func aGattLayoutChangedBetweenConnectionsIsFoundByUUIDAtTheNextOne() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.dropLink(reason: "timeout")
        await harness.simulator.changeGattLayout()
        #expect(await eventually(timeout: .seconds(10)) { harness.events().contains { $0.ev == "gatt-objects-replaced" } })
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        let before = try harness.sequencesOnDisk().count
        #expect(await eventually(timeout: .seconds(5)) { ((try? harness.sequencesOnDisk().count) ?? 0) > before + 10 })
        let (events, _, onDisk, _) = try await harness.quiesceAndStop().parts
        #expect(events.contains { $0.ev == "gatt-objects-replaced" && $0.reason == "between-connections" })
        #expect(onDisk.count == Set(onDisk).count, "no reading twice")
    }

    @Test func aStaleDeviceObjectIsRemovedAndTheDongleFoundAgain() async throws {
        let harness = try await DaemonHarness {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 4
            $0.reconnect.cooldown = .seconds(2)
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.setStaleDevice(true)
        let stale = ContinuousClock.now
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually(timeout: .seconds(20)) { harness.logLines.all.contains { $0.contains("event=device-removed") } })
        #expect(await harness.waitForState(.online, within: .seconds(20)))
        let online = ContinuousClock.now
        let events = harness.events()
        let status = harness.service?.status
        await harness.stop()
        print("figure: stale device object: removed and online again \(Self.seconds(stale, online)) s after the drop")
        #expect(events.contains { $0.ev == "stale-device" && $0.on == false && $0.reason == "device-removed" })
        #expect(status?.state == .online)
    }

    /// The vehicle parks among other advertisers: its window finds nobody,
    /// the others show the controller works, so it is away (no step, no
    /// exhausted window), and online at once when it advertises again.
    @Test func aParkedDongleIsAwayNotAFaultAndBackAtOnce() async throws {
        var options = SimulatorOptions()
        options.otherAdvertisers = 5
        let harness = try await DaemonHarness(simulator: options) {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let parked = ContinuousClock.now
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.away, within: .seconds(20)))
        let away = ContinuousClock.now
        let status = harness.service?.status
        try await Task.sleep(for: .seconds(5))
        let linesWhileAway = harness.logLines.all.count
        await harness.simulator.wake()
        let woken = ContinuousClock.now
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        let online = ContinuousClock.now
        let lines = harness.logLines.all
        await harness.stop()
        print("figure: parked among 5 advertisers (3 s window): away \(Self.seconds(parked, away)) s after the drop, online \(Self.seconds(woken, online)) s after it advertised again; \(linesWhileAway) log lines by then")
        #expect(!lines.contains { $0.contains("→ escalating") })
        #expect(!lines.contains { $0.contains("event=window-exhausted") })
        #expect(lines.filter { $0.contains("event=away") }.count == 1)
        #expect(lines.contains { $0.contains("event=back") })
        #expect(status?.awaySince != nil)
        #expect(woken.duration(to: online) < .seconds(2))
    }

    /// No advertiser but the dongle, and no controller check (no Bluetooth
    /// in this kernel): nothing shows the controller works, so the window
    /// that found nobody is a fault, as a wedged controller's would be.
    @Test func withoutEvidenceAnAbsenceIsAFaultAsBefore() async throws {
        let harness = try await DaemonHarness {
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 3
            $0.reconnect.escalate = [.powerCycle]
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.sleep()
        #expect(await eventually(timeout: .seconds(30)) { harness.logLines.all.contains { $0.contains("event=window-exhausted") } })
        let lines = harness.logLines.all
        await harness.stop()
        #expect(!lines.contains { $0.contains("event=away") })
        #expect(lines.contains { $0.contains("listening 10s") })
    }

    @Test func theReasonOfEachDropIsLoggedShownAndCounted() async throws {
        var options = SimulatorOptions()
        options.disconnectedSignal = true  // BlueZ ≥ 5.83
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        // bluetoothd sends Device1.Disconnected after Connected=false, and
        // Tether learns that it sends any only from the first: that drop's
        // line says unavailable, and the reason follows as its own line.
        await harness.simulator.dropLink(reason: "remote")
        #expect(await eventually { harness.logLines.all.contains { $0.contains("event=disconnect-reason") && $0.contains("reason=remote") } })
        #expect(await harness.waitForState(.online))
        #expect(await eventually { harness.service?.status.lastDisconnectReason == "remote" })
        #expect(harness.service?.status.lastDisconnectAt != nil)
        // From then on a drop's line says its reason is to follow, and it does.
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { harness.logLines.all.contains { $0.contains("event=disconnect-reason") && $0.contains("reason=connection-timeout") } })
        #expect(await harness.waitForState(.online))
        _ = await harness.service?.reconnect()
        #expect(await eventually { harness.logLines.all.contains { $0.contains("event=disconnect-reason") && $0.contains("reason=local") } })
        let log = harness.logLines.all
        await harness.stop()
        let drops = log.filter { $0.contains("event=disconnected") }
        #expect(drops.count == 3, "\(drops)")
        #expect(drops.dropFirst().allSatisfy { $0.contains("reason=pending") && $0.contains("reason to follow from bluetoothd's Device1.Disconnected") }, "\(drops)")
        #expect(!log.contains { $0.contains("event=disconnect-reason") && $0.contains("reason=unavailable") }, "every drop had its reason")
        // Each drop's reason line comes after the drop's own line.
        let order = log.compactMap { line in
            line.contains("event=disconnected") ? "drop" : line.contains("event=disconnect-reason") ? "reason" : nil
        }
        #expect(order == ["drop", "reason", "drop", "reason", "drop", "reason"], "\(order)")
    }

    @Test func aControllerFollowedByAddressIsFollowedToItsNewIndex() async throws {
        let address = SimulatorOptions().adapterAddress
        let harness = try await DaemonHarness { $0.bluez.adapterAddress = address }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let replug = ContinuousClock.now
        await harness.simulator.removeAdapter()
        #expect(await harness.waitForState(.waitingForAdapter))
        try await harness.simulator.addAdapter(name: "hci1", address: address)
        #expect(await harness.waitForState(.online, within: .seconds(10)))
        let online = ContinuousClock.now
        let before = try harness.sequencesOnDisk().count
        #expect(await eventually(timeout: .seconds(5)) { ((try? harness.sequencesOnDisk().count) ?? 0) > before })
        let log = harness.logLines.all
        let status = harness.service?.status
        await harness.stop()
        print("figure: controller back as hci1: online \(Self.seconds(replug, online)) s after it went")
        #expect(log.filter { $0.contains("hci0 (\(address)) is now hci1") }.count == 1)
        #expect(status?.adapter == "hci1")
    }

    @Test func aControllerNamedByIndexSaysWhereItWentAndIsNotFollowed() async throws {
        let address = SimulatorOptions().adapterAddress
        let harness = try await DaemonHarness { $0.bluez.adapter = "hci0" }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.removeAdapter()
        #expect(await harness.waitForState(.waitingForAdapter))
        #expect(await eventually { harness.logLines.all.contains { $0.contains("hci0 (\(address)) is gone") } })
        try await harness.simulator.addAdapter(name: "hci1", address: address)
        #expect(await eventually { harness.logLines.all.contains { $0.contains("set adapter = \"\(address)\" to follow it") } })
        try await Task.sleep(for: .seconds(1))
        let state = harness.state
        await harness.stop()
        #expect(state == .waitingForAdapter, "hci0 was asked for, and hci0 is not there")
    }

    @Test func aHungBluetoothdIsToldApartFromRadioTroubleAndLeftWhenItAnswersAgain() async throws {
        // bluetoothd's main loop hangs: it keeps org.bluez, so the bus says
        // nothing; before, the keep-alive's timeouts ended in connect
        // attempts that failed "no connection within 20s" for as long as it
        // lasted, and status blamed the radio.
        // Told within 2 s (the next answered keep-alive, confirm_every) +
        // 0.8 s (its timeout) + 3 s (the ping's): the 9 s bound keeps room
        // for a loaded machine. With the default 5 s it could take 8.8 s.
        let harness = try await DaemonHarness { $0.keepalive.confirmEvery = .seconds(2) }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let hung = ContinuousClock.now
        await harness.simulator.hang(for: .seconds(10))
        #expect(await harness.waitForState(.waitingForBluez, within: .seconds(9)))
        let told = ContinuousClock.now
        let status = try #require(harness.service?.status)
        #expect(status.bluezProblem?.contains("does not answer") == true, "\(status.bluezProblem ?? "-")")
        #expect(status.summary().hasPrefix("waiting-for-bluez \(DaemonHarness.address): bluetoothd owns org.bluez but does not answer"), "\(status.summary())")
        _ = await eventually(timeout: .seconds(2)) { harness.logLines.all.contains { $0.contains("event=bluez-unresponsive") } }
        #expect(harness.logLines.all.contains { $0.contains("event=bluez-unresponsive") })
        let attemptsWhileHung = harness.logLines.all.filter { $0.contains("event=reconnect-attempt") }.count
        // Its end: online again, and readings.
        #expect(await harness.waitForState(.online, within: .seconds(20)))
        let back = ContinuousClock.now
        #expect(harness.service?.status.bluezProblem == nil)
        _ = await eventually(timeout: .seconds(2)) { harness.logLines.all.contains { $0.contains("event=bluez-answers") } }
        #expect(harness.logLines.all.contains { $0.contains("event=bluez-answers") })
        let before = try harness.sequencesOnDisk().count
        #expect(await eventually(timeout: .seconds(5)) { ((try? harness.sequencesOnDisk().count) ?? 0) > before })
        print("figure: hung bluetoothd (10 s): waiting-for-bluez \(Self.seconds(hung, told)) s into the hang, online again \(Self.seconds(hung, back)) s after it began; \(attemptsWhileHung) connect attempts logged before it was told")
        let onDisk = try harness.sequencesOnDisk()
        await harness.stop()
        #expect(onDisk.count == Set(onDisk).count, "no reading twice")
    }
}
