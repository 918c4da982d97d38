import ChildProcess
import Configuration
import ControlAPI
import DBus
import DurationUnits
import EventLoop
import Foundation
import Readings
import Simulator
import TetherDaemon

extension ReadingRecord: ReadingRecordLike {}

/// The scripted tour behind `tether-dev demo`. Every process it starts is
/// stopped on the way out, whatever happens.
final class DemoScript: Sendable {
    let directory: URL
    let keepFiles: Bool
    let started = ContinuousClock.now

    init(keepFiles: Bool) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tether-demo-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.keepFiles = keepFiles
    }

    private var readingsDirectory: String { directory.appendingPathComponent("readings").path }
    private var eventLogPath: String { directory.appendingPathComponent("simulator.jsonl").path }
    /// The simulator's rfkill (`simulate --rfkill`), which the daemon reads.
    private var rfkillDirectory: String { directory.appendingPathComponent("rfkill").path }

    func say(_ text: String) {
        let elapsed = started.duration(to: .now)
        let seconds = elapsed.inSeconds
        let line = String(format: "demo %6.1fs | ", seconds) + text + "\n"
        FileHandle.standardOutput.write(Data(line.utf8))
    }

    func run(forever: Bool) async -> Bool {
        var bus: BusDaemonProcess?
        var simulator: ChildProcess?
        var daemon: ChildProcess?
        var client: Bus?
        defer { if let client { Task { await client.close() } } }
        defer {
            daemon?.terminate()
            simulator?.terminate()
            bus?.stop()
            if !keepFiles { try? FileManager.default.removeItem(at: directory) }
        }
        do {
            let devTool = try SimulatorRemote.selfPath()
            let tether = try SimulatorRemote.tetherPath()
            say("starting a private dbus-daemon in \(directory.path)")
            let busDaemon = try BusDaemonProcess(directory: directory.appendingPathComponent("bus"))
            bus = busDaemon
            say("starting the simulated bluetoothd: dongle AA:BB:CC:DD:EE:FF, 2 notifications/s, asleep after 6 s without a GATT write")
            simulator = try ChildProcess(executable: devTool, arguments: [
                "simulate", "--bus", busDaemon.address, "--sleep-after", "6s", "--notify-rate", "2",
                "--event-log", eventLogPath, "--rfkill", rfkillDirectory, "--other-advertisers", "5",
            ], stdoutPath: "/dev/null", stderrPath: directory.appendingPathComponent("simulator.log").path)
            let control = try await Bus.connect(address: busDaemon.address)
            client = control
            guard await waitFor("the simulator", within: .seconds(10), { (try? await control.nameOwner(of: SimulatorControl.busName)) != nil }) else { return false }

            let configPath = directory.appendingPathComponent("tether.toml").path
            try demoConfig.write(toFile: configPath, atomically: false, encoding: .utf8)
            say("starting `tether run` (keep-alive write every 2 s); its log follows, prefixed by time and level")
            var environment = ProcessInfo.processInfo.environment
            environment["DBUS_SYSTEM_BUS_ADDRESS"] = busDaemon.address
            // The simulator's rfkill stands in for /dev/rfkill and /sys/class/rfkill.
            environment["TETHER_RFKILL_DEVICE"] = rfkillDirectory + "/rfkill"
            environment["TETHER_RFKILL_SYSFS"] = rfkillDirectory + "/class-rfkill"
            daemon = try ChildProcess(executable: tether, arguments: ["run", "--config", configPath], environment: environment)

            let watcher = ReadingsWatcher(directory: readingsDirectory, say: say)
            let printer = Task { await watcher.follow() }
            defer { printer.cancel() }

            guard await waitOnline(control, "the first connection") else { return false }
            say("online; now 8 s with no fault: the dongle would sleep after 6 s, the keep-alive keeps it awake")
            try await Task.sleep(for: .seconds(8))
            let state = try await simulatorState(control)
            say("the dongle is \(state) after 8 s (it would be asleep without the keep-alive)")

            say(">>> fault 1: the link drops (supervision timeout)")
            try await knob(control, "DropLink", [.string("timeout")])
            guard await waitOnline(control, "reconnecting after the drop") else { return false }

            say(">>> fault 2: the next 3 connects fail with le-connection-abort-by-local, then the link drops")
            try await knob(control, "FailConnects", [.uint32(3), .string("org.bluez.Error.Failed"), .string("le-connection-abort-by-local")])
            try await knob(control, "DropLink", [.string("remote")])
            guard await waitOnline(control, "retrying with backoff") else { return false }

            say(">>> fault 3: bluetoothd crashes and comes back after 1 s")
            try await knob(control, "Crash", [.uint32(1000)])
            try await Task.sleep(for: .milliseconds(300))
            guard await waitOnline(control, "recovering from the crash") else { return false }

            say(">>> fault 4: the dongle's application hangs; its radio keeps the link and accepts writes, but no notification comes")
            let drops = disconnectRequests()
            try await knob(control, "HangApplication", [.boolean(true)])
            let hung = ContinuousClock.now
            guard await waitFor("Tether noticing the silence", within: .seconds(15), { self.disconnectRequests() > drops }) else {
                return false
            }
            say("Tether took the silent link for dead after \(DurationText.rounded(hung.duration(to: .now))) (silence limit 4 s), dropped it and connected again; the application recovers")
            try await Task.sleep(for: .seconds(1))
            try await knob(control, "ResumeApplication")
            guard await waitOnline(control, "readings after the recovery") else { return false }

            say(">>> fault 5: rfkill soft-blocks the controller (airplane mode): the adapter powers off, the link drops")
            let unblocks = rfkillUnblocks()
            let blocked = ContinuousClock.now
            try await knob(control, "Rfkill", [.string("soft")])
            guard await waitFor("Tether clearing the block (rfkill-unblock)", within: .seconds(10), { self.rfkillUnblocks() > unblocks }) else {
                return false
            }
            say("Tether saw the block on rfkill and cleared it \(DurationText.rounded(blocked.duration(to: .now))) later; bluetoothd powers the adapter on again")
            guard await waitOnline(control, "reconnecting after the unblock") else { return false }

            say(">>> the vehicle parks: the dongle stops advertising for 45 s, among 5 other advertisers")
            try await knob(control, "Sleep")
            let parked = ContinuousClock.now
            guard await waitFor("Tether saying the dongle is away (no fault: no controller step)", within: .seconds(45), {
                (try? await self.tetherState(control)) == "away"
            }) else { return false }
            say("Tether found the dongle away \(DurationText.rounded(parked.duration(to: .now))) after it left: no escalation, discovery on")
            try await Task.sleep(until: parked + .seconds(45))
            say("the vehicle starts again: the dongle advertises")
            try await knob(control, "Wake")
            guard await waitOnline(control, "connecting as soon as it advertises") else { return false }
            try await Task.sleep(for: .seconds(2))

            if forever {
                say("the script is done; everything keeps running. Ctrl-C to stop.")
                _ = try await TerminationSignal.wait(on: EventLoop.shared)
            }
            say("stopping the daemon (SIGTERM flushes the readings log)")
            let status = daemon?.terminate(grace: .seconds(10)) ?? -1
            daemon = nil
            printer.cancel()
            return summarize(daemonExit: status)
        } catch {
            say("FAILED: \(error)")
            return false
        }
    }

    private func summarize(daemonExit status: Int32) -> Bool {
        let events = (try? SimulatorEvent.readLog(path: eventLogPath)) ?? []
        let sent = events.filter { $0.ev == "notify" }.compactMap(\.seq)
        let writes = events.filter { $0.ev == "write" }.count
        // The parked spell (the Sleep knob) excepted.
        let sleeps = events.filter { $0.ev == "sleep" && $0.reason != "sleep" }.count
        let records = (try? ReadingLog.readRecords(directory: readingsDirectory)) ?? []
        let onDisk = SimulatorRemote.sequences(in: records)
        let missing = Set(sent).subtracting(onDisk)
        let doubled = onDisk.count - Set(onDisk).count
        let exit = ChildProcess.exitCode(status).map(String.init) ?? "signal"
        say("summary: the dongle sent \(sent.count) notifications; \(records.count) readings on disk; missing \(missing.count), doubled \(doubled)")
        say("summary: \(writes) keep-alive writes, the dongle fell asleep \(sleeps) times; daemon exit status \(exit)")
        // What `tether readings` prints with the config's [decode]: the last
        // reading with its named fields beside its hex.
        if let layout = try? TetherConfig.parse(demoConfig, file: "demo").decode,
           let last = try? String(contentsOfFile: lastReadingsFile() ?? "", encoding: .utf8).split(separator: "\n").last,
           case .decoded(let line) = RecordFields.annotate(Array(last.utf8), with: layout)
        {
            say("the last reading as tether readings prints it ([decode]): \(String(decoding: line, as: UTF8.self))")
        }
        let ok = missing.isEmpty && doubled == 0 && sleeps == 0 && ChildProcess.exitCode(status) == 0 && !sent.isEmpty
        say(ok ? "demo passed" : "demo FAILED")
        return ok
    }

    // MARK: Helpers

    /// The newest file of the readings directory.
    private func lastReadingsFile() -> String? {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: readingsDirectory)) ?? []
        return names.filter { $0.hasSuffix(".jsonl") }.sorted().last.map { readingsDirectory + "/" + $0 }
    }

    private func waitOnline(_ control: Bus, _ what: String) async -> Bool {
        let start = ContinuousClock.now
        let before = readingsOnDisk()
        let ok = await waitFor(what, within: .seconds(20)) {
            (try? await self.simulatorState(control)) == "connected" && self.readingsOnDisk() > before
        }
        if ok { say("online again after \(DurationText.rounded(start.duration(to: .now))) (readings flowing)") }
        return ok
    }

    /// Device1.Disconnect calls the simulator has seen (Tether dropping a link).
    private func disconnectRequests() -> Int {
        ((try? SimulatorEvent.readLog(path: eventLogPath)) ?? []).filter { $0.ev == "disconnect-request" }.count
    }

    /// Unblocks written to the simulator's rfkill (Tether's rfkill-unblock step).
    private func rfkillUnblocks() -> Int {
        ((try? SimulatorEvent.readLog(path: eventLogPath)) ?? []).filter { $0.ev == "rfkill" && $0.type == "client" }.count
    }

    /// How many readings are on disk so far.
    private func readingsOnDisk() -> Int {
        let records = (try? ReadingLog.readRecords(directory: readingsDirectory)) ?? []
        return records.count
    }

    private func waitFor(_ what: String, within limit: Duration, _ condition: () async -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        say("FAILED: \(what) did not happen within \(DurationText.rounded(limit))")
        return false
    }

    private func simulatorState(_ control: Bus) async throws -> String {
        try await SimulatorRemote(bus: control).state()
    }

    /// The daemon's state, from its control interface on the demo's bus.
    private func tetherState(_ control: Bus) async throws -> String? {
        let address = ControlAddress(instance: .default)
        let reply = try await control.call(
            destination: address.busName, path: address.path,
            interface: StandardInterface.properties, method: "Get",
            [.string(ControlAddress.interface), .string("State")]
        )
        return reply.first?.string
    }

    private func knob(_ control: Bus, _ method: String, _ arguments: [DBusValue] = []) async throws {
        try await SimulatorRemote(bus: control).knob(method, arguments)
    }

    private var demoConfig: String {
        """
        [dongle]
        address = "AA:BB:CC:DD:EE:FF"
        silence_limit = "4s"

        [keepalive]
        interval = "2s"
        timeout = "1s"
        sleep_after = "6s"

        [reconnect]
        first_delay = "0s"
        initial_backoff = "500ms"
        max_backoff = "4s"
        connect_timeout = "5s"
        window = "30s"
        window_attempts = 8
        cooldown = "20s"
        escalate = ["power-cycle", "rfkill-unblock"]

        [readings]
        directory = "\(readingsDirectory)"
        flush_interval = "1s"

        [decode]
        fields = ["sequence:u32le", "temperature_c:i16le*0.01", "humidity_pct:u16le*0.01"]
        """
    }
}

/// Prints readings as they reach the log.
private struct ReadingsWatcher: Sendable {
    let directory: String
    let say: @Sendable (String) -> Void

    func follow() async {
        var seen = 0
        while !Task.isCancelled {
            let records = (try? ReadingLog.readRecords(directory: directory)) ?? []
            for record in records.dropFirst(seen) {
                say("reading seq=\(record.seq) \(record.source) \(record.char ?? "") \(record.hex ?? "")")
            }
            seen = max(seen, records.count)
            try? await Task.sleep(for: .milliseconds(250))
        }
    }
}
