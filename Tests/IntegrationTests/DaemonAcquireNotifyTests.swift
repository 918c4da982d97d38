import BlueZ
import Configuration
import DBus
import Foundation
import LinkSupervisor
import Simulator
import TestSupport
import Testing

/// The daemon with `dongle.notify_path = "acquire-notify"` and `"auto"`
/// against the simulator: readings come from the acquired socket, its end
/// is a link-loss sign, it is acquired again after every reconnect and
/// after bluetoothd returns, and the only readings missing are the ones the
/// simulator's log shows bluetoothd dropped by design.
@Suite(.serialized) struct DaemonAcquireNotifyTests {
    static func acquiring(_ config: inout TetherConfig) { config.dongle.notifyPath = .acquireNotify }

    /// Sent (logged `notify`) and dropped by design (`notify-dropped`), by reason.
    static func dropped(_ events: [SimulatorEvent]) -> [String: [UInt32]] {
        Dictionary(grouping: events.filter { $0.kind == .notifyDropped }, by: { $0.reason ?? "?" })
            .mapValues { $0.compactMap(\.seq) }
    }

    @Test func readingsComeFromTheAcquiredSocketAcrossDropsExactlyOnce() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 200
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        for drop in 1...3 {
            try await Task.sleep(for: .seconds(1))
            await harness.simulator.dropLink(reason: "timeout")
            #expect(await eventually { harness.events().filter { $0.ev == "notify-socket-ready" }.count == drop + 1 })
        }
        try await Task.sleep(for: .seconds(1))
        let (events, sent, onDisk, log) = try await harness.quiesceAndStop(settle: .milliseconds(300)).parts

        print("figure: acquire-notify, 3 drops at 200/s: \(sent.count) sent, \(onDisk.count) on disk, dropped by design \(Self.dropped(events).mapValues(\.count))")
        #expect(events.filter { $0.kind == .acquireNotify }.count == 4, "acquired on each of the 4 links")
        #expect(!events.contains { $0.kind == .startNotify })
        #expect(sent.count > 500)
        #expect(onDisk == sent, "on disk: exactly what was sent, in order")
        #expect(Self.dropped(events).isEmpty)
        #expect(log.contains { $0.contains("through an acquired socket") })
    }

    /// The socket's end comes before bluetoothd's Connected=false: the
    /// daemon reports the loss at once and connects again after it.
    @Test func theSocketsEndIsTakenAsTheLinkLoss() async throws {
        let harness = try await DaemonHarness(configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(300))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { harness.events().filter { $0.kind == .notifySocketReady }.count == 2 })
        let events = harness.events()
        let log = harness.logLines.all
        await harness.stop()
        let drop = try #require(events.first { $0.kind == .disconnected })
        let attempt = try #require(events.first { $0.kind == .connectRequest && $0.t > drop.t })
        print("figure: acquire-notify drop to connect attempt \(String(format: "%.1f", attempt.t - drop.t)) ms")
        #expect(attempt.t - drop.t < 500)
        #expect(log.contains { $0.contains("bluetoothd closed the notification socket") })
    }

    @Test func aBluetoothdCrashIsRecoveredAndTheSocketAcquiredAgain() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(500))
        await harness.simulator.crash(restartAfter: .milliseconds(500))
        let resumed = await eventually(timeout: .seconds(8)) {
            guard let restarted = harness.events().first(where: { $0.kind == .restarted }),
                  let firstAfter = harness.events().first(where: { $0.kind == .notify && $0.t > restarted.t })?.seq
            else { return false }
            harness.recorder?.flush()
            return (try? harness.sequencesOnDisk().contains(firstAfter)) ?? false
        }
        let events = harness.events()
        await harness.stop()
        #expect(resumed)
        #expect(events.contains { $0.kind == .notifyReleased && $0.reason == "bluetoothd-crash" })
        #expect(events.filter { $0.kind == .acquireNotify }.count == 2)
    }

    /// Someone else's StopNotify closes our socket while the link stays up:
    /// the daemon acquires again (after `linkLossConfirmation`, 2 s) and
    /// readings resume.
    @Test func aSocketClosedByAnotherClientIsAcquiredAgain() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let other = try await Bus.connect(address: harness.busDaemon.address)
        _ = try await other.call(
            destination: BlueZ.service, path: SimulatorTests.tx, interface: BlueZ.gattCharacteristicInterface,
            method: "StopNotify"
        )
        await other.close()
        let again = await eventually(timeout: .seconds(6)) {
            harness.events().filter { $0.kind == .notifySocketReady }.count == 2
        }
        try await Task.sleep(for: .milliseconds(300))
        let (_, sent, onDisk, _) = try await harness.quiesceAndStop().parts
        #expect(again, "acquired again")
        #expect(onDisk.count == Set(onDisk).count)
        #expect(onDisk.last == sent.last, "readings resumed")
    }

    /// The early-drop window: what the dongle notified between the CCCD
    /// write and the socket is missing, and exactly that.
    @Test func onlyTheEarlyDropWindowIsMissing() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 200
        options.acquireSocketDelay = .milliseconds(50)
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(500))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { harness.events().filter { $0.kind == .notifySocketReady }.count == 2 })
        try await Task.sleep(for: .milliseconds(500))
        let (events, sent, onDisk, _) = try await harness.quiesceAndStop().parts
        let dropped = Self.dropped(events)
        print("figure: acquire-notify with a 50 ms socket delay: \(sent.count) sent, \(onDisk.count) on disk, dropped before the socket \(dropped["socket-not-ready"]?.count ?? 0)")
        #expect(Set(dropped.keys) == ["socket-not-ready"])
        #expect((dropped["socket-not-ready"]?.count ?? 0) >= 4, "about 10 per CCCD write")
        #expect(onDisk == sent)
        let all = Set(onDisk).union(dropped["socket-not-ready"] ?? [])
        #expect(all == Set(1...(all.max() ?? 0)), "nothing missing but the dropped")
    }

    /// On BlueZ before 5.84 a link loss during AcquireNotify's CCCD write
    /// leaves a stale acquisition: the daemon says so (and what clears it)
    /// while its attempts fail, and is online again once bluetoothd restarts.
    @Test func aStaleAcquisitionIsExplainedAndOutlivedByABluetoothdRestart() async throws {
        var options = SimulatorOptions()
        options.acquireSocketDelay = .milliseconds(400)
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await eventually { harness.events().contains { $0.kind == .acquireNotify } })
        await harness.simulator.dropLink(reason: "timeout")
        let explained = await eventually(timeout: .seconds(8)) {
            harness.logLines.all.contains { $0.contains("Notify acquired") && $0.contains("systemctl restart bluetooth") }
        }
        let onlineMeanwhile = harness.state == .online
        await harness.simulator.crash(restartAfter: .milliseconds(300))
        let online = await eventually(timeout: .seconds(15)) {
            harness.events().contains { $0.kind == .notifySocketReady } && harness.state == .online
        }
        let events = harness.events()
        await harness.stop()
        #expect(events.contains { $0.kind == .acquireStale })
        #expect(explained, "the log explains the refusal")
        #expect(!onlineMeanwhile)
        #expect(online, "online with a socket after bluetoothd's restart")
    }

    /// A loop that stalls loses what bluetoothd's end could not hold (by
    /// design, logged reader-behind); what was sent is on disk.
    @Test func aStalledLoopLosesOnlyWhatTheSocketCouldNotHold() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 2000
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        try await Task.sleep(for: .milliseconds(300))
        let loop = try #require(harness.service?.loop)
        loop.execute { usleep(400_000) }
        try await Task.sleep(for: .milliseconds(700))
        let (events, sent, onDisk, _) = try await harness.quiesceAndStop().parts
        let dropped = Self.dropped(events)
        print("figure: acquire-notify at 2000/s with the loop held 400 ms: \(sent.count) sent, \(onDisk.count) on disk, reader-behind \(dropped["reader-behind"]?.count ?? 0)")
        #expect(onDisk == sent)
        #expect(Set(dropped.keys).isSubset(of: ["reader-behind"]))
    }

    /// Datagrams queued when the daemon stops are recorded before the socket closes.
    @Test func datagramsQueuedAtTheStopAreOnDisk() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 0
        let harness = try await DaemonHarness(simulator: options, configure: Self.acquiring)
        try await harness.startDaemon()
        // Subscribed; online comes with the first notification.
        #expect(await harness.waitForState(.waitingForData))
        let (sentBeforeStop, sent, disk) = try await harness.stopWhileTheLoopIsHeld(
            rate: 1000, streaming: .milliseconds(300), hold: .milliseconds(150), after: .milliseconds(80)
        )
        await harness.stop()
        print("figure: acquire-notify stop while \(sentBeforeStop) were sent: \(disk.count) on disk")
        #expect(disk == Array(sent.prefix(disk.count)))
        #expect(disk.count >= sentBeforeStop)
    }

    /// auto: the socket where nobody else listens; StartNotify, with a log
    /// line saying why, where another client holds a notify session.
    @Test(arguments: [false, true])
    func autoAcquiresUnlessAnotherClientListens(anotherClient: Bool) async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options) { $0.dongle.notifyPath = .auto }
        var other: Bus?
        if anotherClient {
            let bus = try await Bus.connect(address: harness.busDaemon.address)
            other = bus
            _ = try await bus.call(destination: BlueZ.service, path: SimulatorTests.device, interface: BlueZ.deviceInterface, method: "Connect")
            _ = await eventually { (await harness.simulator.state) == .connected }
            try await Task.sleep(for: .milliseconds(200))
            _ = try await bus.call(
                destination: BlueZ.service, path: SimulatorTests.tx, interface: BlueZ.gattCharacteristicInterface,
                method: "StartNotify"
            )
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let flowing = await eventually { harness.recorder?.flush(); return ((try? harness.sequencesOnDisk().count) ?? 0) >= 10 }
        let events = harness.events()
        let log = harness.logLines.all
        await other?.close()
        await harness.stop()
        #expect(flowing)
        if anotherClient {
            #expect(!events.contains { $0.kind == .notifySocketReady })
            #expect(log.contains { $0.contains("StartNotify") && $0.contains("D-Bus client") })
        } else {
            #expect(events.contains { $0.kind == .notifySocketReady })
            #expect(!events.contains { $0.kind == .startNotify })
        }
    }
}
