import ChildProcess
import Configuration
import Foundation
import Logging
import Simulator
import Systemd
import TestSupport
import Testing
import TetherDaemon

/// The daemon under a stand-in for systemd: the notify socket and the
/// journal socket are datagram sockets this test binds and reads.
@Suite(.serialized) struct SystemdIntegrationTests {
    /// `tether run` on the harness's simulator, told of `notifySocket` and
    /// given `extra` (WATCHDOG_USEC, …; nil removes a variable).
    static func startDaemon(_ harness: DaemonHarness, notifySocket: String, extra: [String: String?] = [:]) throws -> ChildProcess {
        let config = try DaemonProcessTests.writeConfig(harness)
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = harness.busDaemon.address
        environment["NOTIFY_SOCKET"] = notifySocket
        for (key, value) in extra { environment[key] = value }
        return try ChildProcess(
            executable: DaemonProcessTests.tetherPath, arguments: ["run", "--config", config], environment: environment,
            stderrPath: harness.directory.url.appendingPathComponent("daemon.log").path
        )
    }

    @Test func notifiesReadyStatusWatchdogAndStopping() async throws {
        let harness = try await DaemonHarness()
        let notify = try DatagramReceiver(address: harness.directory.url.appendingPathComponent("notify").path)
        let log = NotifyLog(notify)
        // Pings every 0.5 s.
        let daemon = try Self.startDaemon(harness, notifySocket: notify.address, extra: ["WATCHDOG_USEC": "1000000"])

        #expect(await log.collect(timeout: .seconds(15)) { $0.contains { $0["READY"] == "1" } })
        let ready = try #require(log.messages.first { $0.message["READY"] == "1" })
        #expect(log.messages.first?.message["READY"] == "1", "READY=1 comes first")
        print("figure: sd_notify: process start → READY=1 in \(DurationText.rounded(ready.at))")

        #expect(await log.collect(timeout: .seconds(15)) {
            $0.contains { $0["STATUS"]?.hasPrefix("online \(DaemonHarness.address), last reading") == true }
        }, "STATUS= follows the state: \(log.messages.compactMap { $0.message["STATUS"] })")
        #expect(await log.collect(timeout: .seconds(15)) { $0.filter { $0["WATCHDOG"] == "1" }.count >= 3 })
        let gaps = log.watchdogGaps
        #expect(gaps.allSatisfy { $0 < .milliseconds(900) }, "WATCHDOG=1 at half of WATCHDOG_USEC: gaps \(gaps)")

        daemon.signal(SIGTERM)
        #expect(await log.collect(timeout: .seconds(15)) { $0.contains { $0["STOPPING"] == "1" } })
        let status = daemon.wait(timeout: .seconds(10))
        #expect(ChildProcess.exitCode(status) == 0)
        await harness.stop()
    }

    /// STATUS= says "no reading yet" when the link comes up, and "last
    /// reading …" once the first reading is written: at once, not at the
    /// next watchdog tick (here there is none: no WATCHDOG_USEC).
    @Test func statusTellsOfTheFirstReadingAtOnce() async throws {
        let harness = try await DaemonHarness()
        let notify = try DatagramReceiver(address: harness.directory.url.appendingPathComponent("notify").path)
        let daemon = try Self.startDaemon(harness, notifySocket: notify.address, extra: ["WATCHDOG_USEC": nil])
        var statuses: [String] = []
        let told = await eventually(timeout: .seconds(10)) {
            while let datagram = try? notify.receive() {
                if let status = NotifyDatagram(datagram.payload)["STATUS"] { statuses.append(status) }
            }
            return statuses.contains { $0.hasPrefix("online \(DaemonHarness.address), last reading") }
        }
        #expect(told, "STATUS= lines: \(statuses)")
        _ = daemon.terminate()
        await harness.stop()
    }

    @Test func noWatchdogPingsWithoutWatchdogUsecAndNothingWithoutNotifySocket() async throws {
        let harness = try await DaemonHarness()
        let notify = try DatagramReceiver.abstract()
        // WATCHDOG_PID names another process: not ours to ping.
        let daemon = try Self.startDaemon(harness, notifySocket: notify.address, extra: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"])
        var keys: [String] = []
        _ = await eventually(timeout: .seconds(3)) {
            while let datagram = try? notify.receive() { keys += NotifyDatagram(datagram.payload).keys }
            return false  // watch the whole time
        }
        #expect(keys.contains("READY"), "abstract-namespace NOTIFY_SOCKET works: \(keys)")
        #expect(!keys.contains("WATCHDOG"), "WATCHDOG_PID names another process: \(keys)")
        _ = daemon.terminate()
        await harness.stop()
    }

    @Test func journalEntriesCarryTetherFieldsForEveryLinkEvent() async throws {
        let harness = try await DaemonHarness()
        let journal = try DatagramReceiver(address: harness.directory.url.appendingPathComponent("journal").path)
        let socketPath = journal.address
        harness.extraLogHandlers = [{ label in
            JournalLogHandler(label: label, level: .info, socketPath: socketPath)
        }]
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        await harness.simulator.dropLink(reason: "timeout")
        #expect(await eventually { await harness.simulator.state == .connected && harness.state == .online })
        // Read while the daemon logs: a full socket buffer makes the handler
        // wait for room, as it would for a busy journald.
        var entries: [ParsedJournalEntry] = []
        _ = await eventually {
            while let datagram = try? journal.receive() {
                if let entry = try? ParsedJournalEntry(datagram.passedFile ?? datagram.payload) { entries.append(entry) }
            }
            let events = Set(entries.compactMap { $0["TETHER_EVENT"] })
            return events.isSuperset(of: ["disconnected", "reconnect-attempt", "connected"])
        }
        let events = entries.compactMap { $0["TETHER_EVENT"] }
        #expect(events.contains("disconnected") && events.contains("reconnect-attempt") && events.contains("connected"), "\(events)")
        let drop = try #require(entries.first { $0["TETHER_EVENT"] == "disconnected" })
        #expect(drop["PRIORITY"] == "4")
        #expect(drop["TETHER_DEVICE"] == DaemonHarness.address)
        #expect(drop["TETHER_STATE"] != nil)
        #expect(drop["MESSAGE"]?.hasPrefix("link lost (reason") == true, "\(drop["MESSAGE"] ?? "-")")
        // The simulator is a 5.66 bluetoothd (no Device1.Disconnected) and the test
        // opens no management socket: the reason is unavailable, and says so.
        #expect(drop["TETHER_REASON"] == "unavailable")
        #expect(drop["SYSLOG_IDENTIFIER"] == "tether")
        let attempt = try #require(entries.first { $0["TETHER_EVENT"] == "reconnect-attempt" })
        #expect(attempt["TETHER_ATTEMPT"] == "1")
        await harness.stop()
    }
}
