import DBus
import EventLoop
import Foundation
import Simulator
import TestSupport
import Testing

/// What the single event loop promises: BlueZ calls reach bluetoothd in the
/// order the supervisor decided them, and nothing that reached the daemon is
/// lost when it stops. The simulator's event log, written as bluetoothd
/// serves each call, is the ground truth.
@Suite(.serialized) struct DaemonOrderingTests {
    /// InProgress makes the supervisor cancel with Disconnect and retry at
    /// once (zero backoff): the cancel must be served before the retry.
    @Test func everyCancellingDisconnectReachesBluetoothdBeforeTheNextConnect() async throws {
        var options = SimulatorOptions()
        options.connectLatency = .milliseconds(2)
        let harness = try await DaemonHarness(simulator: options) { config in
            config.reconnect.firstDelay = .zero
            config.reconnect.initialBackoff = .zero
            config.reconnect.maxBackoff = .zero
            config.reconnect.windowAttempts = 40
        }
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.failNextConnects(
            8, errorName: "org.bluez.Error.InProgress", message: "Operation already in progress"
        )
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually(timeout: .seconds(10)) {
            harness.events().filter { $0.ev == "connected" }.count >= 2
        })
        let events = harness.events()
        await harness.stop()

        let calls = events.filter { ["connect-request", "disconnect-request", "connect-failed"].contains($0.ev) }
        var cancels = 0
        for (index, event) in calls.enumerated() where event.ev == "connect-failed" && event.error == "org.bluez.Error.InProgress" {
            // The next call bluetoothd served after this failure is the cancel.
            let next = calls[(index + 1)...].first { $0.ev != "connect-failed" }
            #expect(next?.ev == "disconnect-request", "after InProgress at \(event.t) ms came \(next?.ev ?? "nothing")")
            if next?.ev == "disconnect-request" { cancels += 1 }
        }
        print("figure: \(cancels) InProgress failures, each cancelled by a Disconnect served before the next Connect")
        #expect(cancels == 8)
    }

    /// A dongle bluetoothd does not know yet is searched for with discovery;
    /// once it is seen the supervisor stops discovery and connects, in that
    /// order, both sent at once.
    @Test func stopDiscoveryReachesBluetoothdBeforeTheConnectItLeadsTo() async throws {
        var options = SimulatorOptions()
        options.known = false
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        let events = harness.events()
        await harness.stop()

        let start = try #require(events.firstIndex { $0.ev == "discovery-start" }, "no discovery for an unknown dongle")
        let connect = try #require(events.firstIndex { $0.ev == "connect-request" })
        let stop = events.firstIndex { $0.ev == "discovery-stop" }
        #expect(start < connect)
        #expect(stop != nil && stop! < connect, "StopDiscovery at \(stop.map { events[$0].t } ?? -1) ms, Connect at \(events[connect].t) ms")
    }

    /// Notifications that reached the daemon's socket (or the bus's queue
    /// for it) before the stop are recorded: the loop is held so they pile
    /// up unread, the stop is asked for, and only then is the loop let go.
    @Test func notificationsSentBeforeTheStopAreAllOnDisk() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 0
        let harness = try await DaemonHarness(simulator: options)
        try await harness.startDaemon()
        // Subscribed; online comes with the first notification.
        #expect(await harness.waitForState(.waitingForData))
        let (sentBeforeStop, sent, disk) = try await harness.stopWhileTheLoopIsHeld(
            rate: 2000, streaming: .milliseconds(500), hold: .milliseconds(400), after: .milliseconds(250)
        )
        await harness.stop()

        print("figure: stop while \(sentBeforeStop) notifications were sent: \(disk.count) on disk, \(sent.count) sent in all")
        #expect(disk == Array(sent.prefix(disk.count)), "on disk is not a gap-free prefix of what was sent")
        #expect(disk.count >= sentBeforeStop, "\(sentBeforeStop - disk.count) sent before the stop are missing")
    }
}
