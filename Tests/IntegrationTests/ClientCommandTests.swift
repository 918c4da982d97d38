import ChildProcess
import DBus
import Foundation
import Readings
import Simulator
import TestSupport
import Testing
import TetherDaemon

/// `tether status`, `reconnect`, `scan` as an operator runs them, against a
/// `tether run` process on the simulator.
@Suite(.serialized) struct ClientCommandTests {
    /// `tether run` on the harness's bus and simulator; its config's path.
    static func startDaemon(_ harness: DaemonHarness) throws -> (ChildProcess, config: String) {
        let config = try DaemonProcessTests.writeConfig(harness)
        let daemon = try ChildProcess(
            executable: DaemonProcessTests.tetherPath, arguments: ["run", "--config", config],
            environment: ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": harness.busDaemon.address]) { $1 },
            stderrPath: harness.directory.url.appendingPathComponent("daemon.log").path
        )
        return (daemon, config)
    }

    @Test func statusJSONAndReconnectWaitAgainstADaemonOnTheSimulator() async throws {
        let harness = try await DaemonHarness()
        let (daemon, config) = try Self.startDaemon(harness)
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)

        var json: [String: Any] = [:]
        let online = await eventually(timeout: .seconds(15), every: .milliseconds(200)) {
            guard let result = try? await tether.run(["status", "--json"]), result.status == 0,
                  let object = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            else { return false }
            json = object
            return object["state"] as? String == "online"
        }
        #expect(online, "status --json never said online: \(json)")
        let keys: Set<String> = [
            "instance", "running", "answering", "state", "device", "adapter", "connected_since", "connected_for_seconds",
            "last_reading_at", "last_reading_age_seconds", "readings_written", "readings_pending", "readings_dropped",
            "readings_error", "reconnects", "window_attempt",
            "next_attempt_in_seconds", "last_error", "forwarder", "silence_limit_seconds", "silence_events",
            "last_disconnect_reason", "last_disconnect_at", "adapter_problem", "bond_problem", "bluez_problem",
            "away_since", "bound_dongle", "bootloader", "controller",
        ]
        #expect(Set(json.keys) == keys)
        #expect(json["device"] as? String == DaemonHarness.address)
        #expect(json["running"] as? Bool == true)

        let text = try await tether.run(["status"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("tether (default): online") && text.stdout.contains("via hci0"), "\(text.all)")

        let reconnect = try await tether.run(["reconnect", "--wait", "--timeout", "20s"])
        #expect(reconnect.status == 0, "\(reconnect.all)")
        #expect(reconnect.stdout.contains("attempt 1 started"), "\(reconnect.all)")
        #expect(reconnect.stdout.contains("waiting-for-data → online"), "\(reconnect.all)")
        #expect(reconnect.stdout.contains("online again after"), "\(reconnect.all)")
        let after = try await tether.run(["status", "--json"])
        let reconnects = (try? JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [String: Any])?["reconnects"] as? Int
        #expect(reconnects == 1, "\(after.all)")

        // A dongle that cannot be reached: --wait gives up with the last error.
        await harness.simulator.failNextConnects(1000, errorName: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
        let failing = try await tether.run(["reconnect", "--wait", "--timeout", "2s"])
        #expect(failing.status == 1, "\(failing.all)")
        #expect(failing.stderr.contains("not online after 2s") && failing.stderr.contains("le-connection-abort-by-local"), "\(failing.all)")
        await harness.simulator.failNextConnects(0, errorName: "org.bluez.Error.Failed", message: "")

        let status = daemon.terminate()
        #expect(ChildProcess.exitCode(status) == 0)

        // What the daemon wrote, printed back as stored: every record, in seq order.
        let readings = try await tether.run(["readings", "--config", config, "--since", "1h"])
        #expect(readings.status == 0, "\(readings.stderr)")
        let lines = readings.stdout.split(separator: "\n")
        let onDisk = try harness.records()
        #expect(!onDisk.isEmpty && lines.count == onDisk.count, "\(lines.count) printed, \(onDisk.count) on disk")
        let seqs = lines.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
        #expect(seqs == Array(1...onDisk.count))
        let missing = try await tether.run(["readings", "--directory", harness.directory.url.appendingPathComponent("nope").path])
        #expect(missing.status == 66, "\(missing.all)")
        await harness.stop()
    }

    /// `tether readings --redate`: the worked example of docs/operations.md
    /// ("Dating readings") through the CLI, on a log written as the daemon
    /// writes it.
    @Test func readingsRedatePrintsTheTrueTimeOfRecordsTakenBeforeTheClockWasSet() async throws {
        let harness = try await DaemonHarness()
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let log = try ReadingLog(directory: harness.readingsDirectory, rotateSize: 1 << 20, retainSize: 1 << 30)
        let boot = "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11"
        func reading(_ wall: String, _ sinceBoot: Duration, synced: Bool) throws -> Reading {
            let milliseconds = try #require(UTCTimestamp.milliseconds(wall))
            return Reading(
                receivedAt: Date(timeIntervalSince1970: Double(milliseconds) / 1000), device: DaemonHarness.address, characteristic: "c",
                payload: [1], boot: BootStamp(bootID: boot, sinceBoot: sinceBoot, clockSynchronised: synced))
        }
        try log.append([
            try reading("2026-12-01T08:00:05.000Z", .seconds(21), synced: false),
            try reading("2026-12-06T07:15:40.000Z", .seconds(95), synced: true),
        ])
        log.close()
        let printed = try await tether.run(["readings", "--directory", harness.readingsDirectory, "--redate"])
        #expect(printed.status == 0, "\(printed.all)")
        let lines = printed.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines.first?.hasSuffix(#""clock_synced":false,"ts_redated":"2026-12-06T07:14:26.000Z"}"#) == true, "\(lines)")
        #expect(lines.last?.contains("ts_redated") == false, "a synchronised record is printed as stored")
        let plain = try await tether.run(["readings", "--directory", harness.readingsDirectory])
        #expect(!plain.stdout.contains("ts_redated"), "without --redate the records are printed exactly as stored")
        let both = try await tether.run(["readings", "--directory", harness.readingsDirectory, "--redate", "--follow"])
        #expect(both.status == 64 && both.stderr.contains("cannot be combined with --follow"), "\(both.all)")
        await harness.stop()
    }

    /// `tether readings` with the config's [decode]: `fields` beside `hex`,
    /// with --redate too; a payload of another length printed with its hex
    /// alone and counted on stderr; --raw prints the records as stored.
    @Test func readingsPrintsTheDeclaredFieldsBesideTheHex() async throws {
        let harness = try await DaemonHarness()
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let log = try ReadingLog(directory: harness.readingsDirectory, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append([
            Reading(device: DaemonHarness.address, characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: [0xd2, 0x04, 0x00, 0x00, 0x66, 0x08, 0x94, 0x11]),
            Reading(device: DaemonHarness.address, characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: [1, 2, 3]),
        ])
        log.close()
        let config = harness.directory.path + "/decode.toml"
        try """
            [dongle]
            address = "\(DaemonHarness.address)"

            [readings]
            directory = "\(harness.readingsDirectory)"

            [decode]
            fields = ["sequence:u32le", "temperature_c:i16le*0.01", "humidity_pct:u16le*0.01"]

            """.write(toFile: config, atomically: true, encoding: .utf8)
        let printed = try await tether.run(["readings", "--config", config])
        #expect(printed.status == 0, "\(printed.all)")
        let lines = printed.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines.first?.contains(#""hex":"d204000066089411""#) == true, "\(lines)")
        #expect(lines.first?.hasSuffix(#","fields":{"sequence":1234,"temperature_c":21.5,"humidity_pct":45}}"#) == true, "\(lines)")
        #expect(lines.last?.contains("fields") == false && lines.last?.contains(#""hex":"010203""#) == true, "\(lines)")
        #expect(printed.stderr.contains("1 reading did not fit [decode] (8 bytes declared; payloads of 3 bytes)"), "\(printed.all)")
        let redated = try await tether.run(["readings", "--config", config, "--redate"])
        #expect(redated.stdout.contains(#""fields":{"sequence":1234"#), "\(redated.all)")
        let raw = try await tether.run(["readings", "--config", config, "--raw"])
        #expect(!raw.stdout.contains("fields") && raw.stderr.isEmpty, "\(raw.all)")
        let direct = try await tether.run(["readings", "--directory", harness.readingsDirectory])
        #expect(!direct.stdout.contains("fields"), "--directory alone reads no config")
        print("figure: tether readings with [decode]: \(lines.first ?? "")")
        await harness.stop()
    }

    @Test func clientsOfADaemonThatIsNotRunningExit3() async throws {
        let harness = try await DaemonHarness()
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let status = try await tether.run(["status"])
        #expect(status.status == 3, "\(status.all)")
        #expect(status.stderr.contains("not running") && status.stderr.contains("io.tether.Tether"), "\(status.all)")
        let json = try await tether.run(["status", "--json", "--instance", "east", "--forwarder-state-directory", harness.directory.path])
        #expect(json.status == 3)
        #expect(json.stdout.contains(#"{"instance":"east","running":false,"answering":false,"forwarder":null}"#), "\(json.all)")
        let reconnect = try await tether.run(["reconnect", "--instance", "east"])
        #expect(reconnect.status == 3)
        #expect(reconnect.stderr.contains("tether@east.service"), "\(reconnect.all)")
        let bad = try await tether.run(["status", "--instance", "no/slashes"])
        #expect(bad.status == 64, "a bad instance name is a usage error: \(bad.all)")
        await harness.stop()
    }

    /// A daemon that owns its bus name but does not answer (here stopped with
    /// SIGSTOP; in the field a stuck loop): `status` says so within --timeout,
    /// naming its pid, and exits 4 (LSB: status unknown), instead of waiting
    /// out libdbus's 25 s and printing a bare NoReply.
    @Test func statusOfADaemonThatDoesNotAnswerSaysSoWithinTheTimeout() async throws {
        let harness = try await DaemonHarness()
        let (daemon, _) = try Self.startDaemon(harness)
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let answering = await eventually(timeout: .seconds(15), every: .milliseconds(200)) {
            (try? await tether.run(["status", "--json"]))?.status == 0
        }
        #expect(answering, "the daemon never answered status")

        daemon.signal(SIGSTOP)
        let clock = ContinuousClock()
        let start = clock.now
        let text = try await tether.run(["status", "--timeout", "1s"])
        let took = start.duration(to: clock.now)
        #expect(text.status == 4, "\(text.all)")
        #expect(text.stderr.contains("the daemon (pid \(daemon.pid)) owns io.tether.Tether"), "\(text.all)")
        #expect(text.stderr.contains("did not answer within 1s") && text.stderr.contains("systemctl restart tether.service"), "\(text.all)")
        #expect(took < .seconds(10), "status took \(took) with --timeout 1s")
        let json = try await tether.run(["status", "--json", "--timeout", "1s"])
        #expect(json.status == 4, "\(json.all)")
        #expect(json.stdout.contains(#"{"instance":"default","running":true,"answering":false,"forwarder":null}"#), "\(json.all)")

        daemon.signal(SIGCONT)
        let again = try await tether.run(["status", "--json"])
        #expect(again.status == 0, "\(again.all)")
        #expect(again.stdout.contains(#""running":true,"answering":true,"#), "\(again.all)")
        #expect(ChildProcess.exitCode(daemon.terminate()) == 0)
        await harness.stop()
    }

    @Test func scanListsTheAdvertisingDongle() async throws {
        let harness = try await DaemonHarness()
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let scan = try await tether.run(["scan", "--timeout", "1s"])
        #expect(scan.status == 0, "\(scan.all)")
        let row = scan.stdout.split(separator: "\n").first { $0.hasPrefix(DaemonHarness.address) }
        #expect(row?.contains("Tether-Dongle") == true && row?.contains("NUS") == true && row?.contains("Nordic 0x0059") == true, "\(scan.all)")
        #expect(scan.stderr.contains("found \(DaemonHarness.address)"), "progress names the find: \(scan.all)")

        // Asleep, it does not advertise: nothing to list, still exit 0.
        await harness.simulator.sleep()
        let none = try await tether.run(["scan", "--timeout", "1s"])
        #expect(none.status == 0)
        #expect(none.stdout.contains("no dongle found"), "\(none.all)")

        // A hung bluetoothd (it keeps its name, answers nothing): told as
        // such after the client's 10 s call timeout, with the pid the bus
        // gives (the simulator runs in this process).
        await harness.simulator.hang(for: .seconds(11))
        let hung = try await tether.run(["scan", "--timeout", "1s"])
        #expect(hung.status == 1, "\(hung.all)")
        #expect(hung.stderr.contains("bluetoothd (pid \(getpid())) owns org.bluez on the system bus but did not answer within 10s"), "\(hung.all)")

        await harness.simulator.setAdapterPowered(false)
        let off = try await tether.run(["scan", "--timeout", "1s"])
        #expect(off.status == 1)
        #expect(off.stderr.contains("powered off"), "\(off.all)")
        await harness.simulator.stop()
        let gone = try await tether.run(["scan", "--timeout", "1s"])
        #expect(gone.status == 1, "\(gone.all)")
        await harness.stop()
    }
}
