import BlueZ
import Configuration
import DBus
import Foundation
import LinkPolicy
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// The daemon against the simulated bluetoothd, end to end. The simulator's
/// event log is the ground truth. Serialized: these tests measure timing on a
/// 2-core machine and must not compete with each other.
@Suite(.serialized) struct DaemonTests {
    /// Milliseconds between consecutive events of a kind.
    static func gaps(_ times: [Double]) -> [Double] { zip(times, times.dropFirst()).map { $1 - $0 } }

    @Test func keepAliveHoldsASleepyDongleAwake() async throws {
        var options = SimulatorOptions()
        options.sleepAfter = .seconds(3)
        let harness = try await DaemonHarness(simulator: options) { $0.keepalive.interval = .seconds(1) }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .seconds(20))
        let events = harness.events()
        await harness.stop()

        #expect(!events.contains { $0.ev == "sleep" }, "the dongle fell asleep")
        let writes = events.filter { $0.ev == "write" }
        let polls = writes.map(\.t)
        #expect(polls.count >= 18)
        // keepalive.confirm_every (5 s): one write in five waits for an
        // answer, the rest ask for none, and those keep the dongle awake too.
        let unanswered = writes.filter { $0.noReply == true }.count
        #expect(unanswered >= 13 && unanswered <= polls.count - 4, "\(unanswered) of \(polls.count) writes asked for no answer")
        let maxGap = Self.gaps(polls).max() ?? .infinity
        print("figure: keep-alive 1 s over 20 s: \(polls.count) polls (\(unanswered) without a reply), max gap \(Int(maxGap)) ms, no sleep")
        #expect(maxGap <= 1000 + 200, "max gap between polls \(maxGap) ms")
    }

    @Test func withoutKeepAliveTheDongleFallsAsleep() async throws {
        var options = SimulatorOptions()
        options.sleepAfter = .seconds(3)
        let harness = try await DaemonHarness(simulator: options) { $0.keepalive.enabled = false }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let slept = await eventually(timeout: .seconds(8)) { harness.events().contains { $0.ev == "sleep" } }
        let writes = harness.events().filter { $0.ev == "write" }.count
        await harness.stop()
        #expect(slept, "the control run: with no keep-alive the dongle must sleep")
        #expect(writes == 0)
    }

    @Test(arguments: [Duration.zero, .milliseconds(300)])
    func anUnexpectedDropIsFollowedByAnAttemptAtOnce(firstDelay: Duration) async throws {
        let harness = try await DaemonHarness { $0.reconnect.firstDelay = firstDelay }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(500))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { harness.events().filter { $0.ev == "connected" }.count >= 2 })
        let events = harness.events()
        await harness.stop()

        let drop = try #require(events.first { $0.ev == "disconnected" })
        let attempt = try #require(events.first { $0.ev == "connect-request" && $0.t > drop.t })
        let limit = 100 + Double(firstDelay.components.attoseconds) / 1e15 + Double(firstDelay.components.seconds) * 1000
        print("figure: first_delay \(firstDelay): drop to connect attempt \(String(format: "%.1f", attempt.t - drop.t)) ms")
        #expect(attempt.t - drop.t <= limit, "attempt \(attempt.t - drop.t) ms after the drop (limit \(limit))")
        #expect(attempt.t - drop.t >= limit - 100 - 5)
    }

    /// bluetoothd 5.66 in the e2e guest: Connect() succeeded, the GATT
    /// objects and ServicesResolved=true came, Connected=true never did.
    @Test func aConnectionSignalledOnlyByServicesResolvedGoesOnline() async throws {
        var options = SimulatorOptions()
        options.connectedUnsignalled = true
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        let online = await harness.waitForState(.online)
        let written = await eventually { (try? harness.sequencesOnDisk().count) ?? 0 >= 5 }
        await harness.stop()
        #expect(online)
        #expect(written, "readings flow")
    }

    /// A notification that bluetoothd flushes in one PropertiesChanged with
    /// Notifying=true is a reading like any other (found by fuzzing the
    /// BlueZ event decoder: it only took a Value that came alone).
    @Test func aValueSharingItsSignalWithNotifyingIsARecordedReading() async throws {
        var options = SimulatorOptions()
        options.valueWithNotifying = true
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        #expect(await eventually { (try? harness.sequencesOnDisk().count) ?? 0 >= 5 })
        await harness.stopDaemon()
        let onDisk = try harness.sequencesOnDisk()
        await harness.stop()
        #expect(onDisk.first == 1, "the first reading, sent with Notifying=true, is on disk")
        #expect(onDisk == Array(1...UInt32(onDisk.count)), "in order, none missing or doubled")
    }

    @Test func failingConnectsFollowTheScheduleAndBounds() async throws {
        let harness = try await DaemonHarness {
            $0.reconnect.initialBackoff = .milliseconds(200)
            $0.reconnect.maxBackoff = .milliseconds(800)
            $0.reconnect.jitter = 0.2
            $0.reconnect.window = .seconds(3)
            $0.reconnect.windowAttempts = 6
            $0.reconnect.cooldown = .seconds(2)
            $0.reconnect.removeStaleDevice = .never  // the schedule alone; removal has its own test
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.failNextConnects(1000, errorName: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal)
        await harness.simulator.dropLink(reason: "timeout")
        try await Task.sleep(for: .seconds(8))
        let events = harness.events()
        let state = harness.state
        await harness.stop()

        let drop = try #require(events.first { $0.ev == "disconnected" })
        let attempts = events.filter { $0.ev == "connect-request" && $0.t > drop.t }.map(\.t)
        let window = attempts.filter { $0 - drop.t < 3000 }
        #expect(window.count >= 4 && window.count <= 6, "attempts in the window: \(window.count)")
        // Gap n is the backoff before attempt n+1 (jittered ±20%) plus one failed connect (~30 ms).
        let policy = ReconnectPolicy(initialBackoff: .milliseconds(200), maxBackoff: .milliseconds(800), jitter: 0.2)
        for (index, gap) in Self.gaps(window).enumerated() {
            let base = Double(policy.baseDelay(beforeAttempt: index + 2).components.attoseconds) / 1e15
                + Double(policy.baseDelay(beforeAttempt: index + 2).components.seconds) * 1000
            #expect(gap >= base * 0.8 && gap <= base * 1.2 + 150, "gap \(index): \(gap) ms, backoff \(base) ms")
        }
        // After the window: cooling down with discovery, one blind attempt per cooldown.
        let later = attempts.filter { $0 - drop.t >= 3000 }
        print("figure: attempts after the drop (ms): \(attempts.map { Int($0 - drop.t) })")
        #expect(later.count >= 1 && later.count <= 3, "blind attempts: \(later)")
        for gap in Self.gaps(later) { #expect(gap >= 1900) }
        #expect(events.contains { $0.ev == "discovery-start" })
        #expect(state == .coolingDown || state == .connecting)
    }

    @Test func inProgressIsCancelledAndRetried() async throws {
        let harness = try await DaemonHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.failNextConnects(1, errorName: BlueZ.ErrorName.inProgress, message: BlueZ.FailedMessage.inProgressText)
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { harness.events().filter { $0.ev == "connected" }.count >= 2 })
        #expect(await harness.waitForState(.online))
        let log = harness.logLines.all
        await harness.stop()
        #expect(log.contains { $0.contains("InProgress") })
    }

    @Test func aConnectThatHangsIsCancelledWithDisconnect() async throws {
        let harness = try await DaemonHarness { $0.reconnect.connectTimeout = .seconds(1) }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.setConnectLatency(.seconds(30))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually(timeout: .seconds(3)) { harness.events().contains { $0.ev == "connect-failed" } })
        await harness.simulator.setConnectLatency(.milliseconds(30))
        #expect(await eventually { harness.events().filter { $0.ev == "connected" }.count >= 2 })
        let events = harness.events()
        await harness.stop()
        let drop = try #require(events.first { $0.ev == "disconnected" })
        let cancelled = try #require(events.first { $0.ev == "connect-failed" && $0.t > drop.t })
        #expect(cancelled.t - drop.t >= 900 && cancelled.t - drop.t <= 1500, "cancelled after \(cancelled.t - drop.t) ms")
    }

    @Test func aBluetoothdCrashIsRecoveredAndReadingsResume() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .seconds(1))
        await harness.simulator.crash(restartAfter: .milliseconds(500))
        #expect(await eventually { harness.events().contains { $0.ev == "restarted" } })
        let restarted = try #require(harness.events().first { $0.ev == "restarted" })
        // Readings resume: a notification sent after the restart reaches the disk within 5 s.
        let resumed = await eventually(timeout: .seconds(5)) {
            let firstAfter = harness.events().first { $0.ev == "notify" && $0.t > restarted.t }?.seq
            guard let firstAfter else { return false }
            harness.recorder?.flush()
            return (try? harness.sequencesOnDisk().contains(firstAfter)) ?? false
        }
        let log = harness.logLines.all
        if let first = harness.events().first(where: { $0.ev == "notify" && $0.t > restarted.t }) {
            print("figure: bluetoothd back to first notification sent \(Int(first.t - restarted.t)) ms")
        }
        await harness.stop()
        #expect(resumed, "readings did not resume; log:\n\(log.suffix(20).joined(separator: "\n"))")
    }

    @Test func noConnectAttemptsWhileTheAdapterIsOff() async throws {
        let harness = try await DaemonHarness()
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.setAdapterPowered(false)
        #expect(await harness.waitForState(.waitingForAdapter))
        try await Task.sleep(for: .seconds(3))
        await harness.simulator.setAdapterPowered(true)
        #expect(await harness.waitForState(.online))
        let events = harness.events()
        await harness.stop()
        let off = try #require(events.first { $0.ev == "power" && $0.on == false })
        let on = try #require(events.first { $0.ev == "power" && $0.on == true })
        // bluetoothd reports the dropped link before Powered=false (the kernel
        // disconnects first), so one attempt may race the power-off; after
        // that, none until power returns.
        let during = events.filter { $0.ev == "connect-request" && $0.t > off.t && $0.t < on.t }
        #expect(during.count <= 1)
        #expect(!during.contains { $0.t > off.t + 100 }, "attempts while powered off: \(during.map(\.t))")
        #expect(events.contains { $0.ev == "connect-request" && $0.t > on.t })
    }

    @Test func everyNotificationIsOnDiskExactlyOnceAcrossDrops() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 200
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        for _ in 0..<3 {
            try await Task.sleep(for: .seconds(1))
            await harness.simulator.dropLink(reason: "timeout")
            #expect(await harness.waitForState(.online))
        }
        try await Task.sleep(for: .seconds(1))
        // Quiesce the dongle first, so nothing is in flight when the daemon stops.
        await harness.simulator.setNotifyRate(0)
        try await Task.sleep(for: .milliseconds(300))
        await harness.stopDaemon()
        let sent = harness.sequencesSent()
        let onDisk = try harness.sequencesOnDisk()
        let seqs = try harness.records().map(\.seq)
        await harness.stop()
        print("figure: 3 drops at 200 notifications/s: \(sent.count) sent, \(onDisk.count) on disk, \(Set(onDisk).count) distinct")
        #expect(sent.count > 500)
        #expect(onDisk.count == Set(onDisk).count, "doubled readings")
        #expect(Set(sent).subtracting(onDisk).isEmpty, "missing \(Set(sent).subtracting(onDisk).count) readings")
        #expect(seqs == Array(1...UInt64(seqs.count)))
    }

    @Test func subscribingAgainAfterAReconnectDoesNotDoubleReadings() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 100
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .seconds(1))
        await harness.stopDaemon()
        let onDisk = try harness.sequencesOnDisk()
        await harness.stop()
        #expect(!onDisk.isEmpty)
        #expect(onDisk.count == Set(onDisk).count)
    }

    @Test func anExhaustedWindowEscalatesCoolsDownAndAWokenDongleIsReconnected() async throws {
        let harness = try await DaemonHarness {
            $0.reconnect.initialBackoff = .milliseconds(200)
            $0.reconnect.maxBackoff = .milliseconds(400)
            $0.reconnect.window = .seconds(2)
            $0.reconnect.windowAttempts = 5
            $0.reconnect.cooldown = .seconds(60)
            $0.reconnect.escalate = [.powerCycle, .hciReset]
            // The asleep dongle's connects end in le-connection-abort-by-local:
            // this test follows the escalation and the cooldown, not the removal.
            $0.reconnect.removeStaleDevice = .never
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.sleep()
        #expect(await harness.waitForState(.coolingDown, within: .seconds(15)))
        let events = harness.events()
        #expect(events.contains { $0.ev == "power" && $0.on == false }, "power-cycle switched the adapter off")
        #expect(events.contains { $0.ev == "power" && $0.on == true }, "and on again")
        #expect(harness.logLines.all.contains { $0.contains("hci-reset") })
        // The state turns cooling-down when the daemon decides it; its StartDiscovery
        // reaches the simulator (and its event log) a moment later: wait for it.
        #expect(
            await eventually(timeout: .seconds(3)) { harness.events().contains { $0.ev == "discovery-start" } },
            "cooling down listens for the dongle")
        // The dongle is woken long after the window: it advertises, and Tether connects at once.
        try await Task.sleep(for: .seconds(6))
        await harness.simulator.wake()
        let woken = ContinuousClock.now
        #expect(await harness.waitForState(.online, within: .seconds(5)))
        print("figure: woken dongle to online after an exhausted window: \(DurationText.rounded(woken.duration(to: .now)))")
        await harness.stop()
    }
}
