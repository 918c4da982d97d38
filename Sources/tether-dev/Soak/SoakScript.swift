import ChildProcess
import Configuration
import DBus
import DurationUnits
import Foundation
import LinkSupervisor
import Pacing
import Readings
import Simulator
import TetherDaemon

/// `tether-dev soak`: random faults for a while, then the invariants checked.
/// Every process it starts is stopped on the way out, whatever happens.
final class SoakScript: @unchecked Sendable {
    let duration: Duration
    let notifyRate: Double
    let seed: UInt64
    let keepFiles: Bool
    /// The faults to draw from (empty: all of them).
    let only: Set<SoakFault>
    let directory: URL
    let started = ContinuousClock.now
    private var random: SplitMix64
    /// The index the simulated controller has now (0 or 1: `adapter-renumbered` swaps it).
    private var adapterIndex = 0

    /// The config's retry window, checked against the attempts the daemon made.
    static let windowAttempts = 6
    /// The soak's dongle.silence_limit: two keep-alive intervals, so a hung
    /// application is caught within a fault's 11–16 s.
    static let silenceLimit: Duration = .seconds(5)

    private var bus: BusDaemonProcess?
    private var simulatorProcess: ChildProcess?
    private var daemon: ChildProcess?
    private var remote: SimulatorRemote?
    /// This `tether-dev` (for `simulate`) and the `tether` next to it (for `run`).
    private var devTool = ""
    private var tether = ""
    private var diskFullUsable = false
    private var diskFullSkipReason: String?

    /// Sequence ranges in which readings may be missing: from 200 ms before
    /// a kill (the recorder's queue may not have reached write(2)) to the
    /// new daemon being online.
    private var killWindows: [ClosedRange<UInt64>] = []
    private var faults: [SoakFault: Int] = [:]
    private var recoveries: [Duration] = []
    private var violations: [String] = []
    /// Since when the adapter is usable again after this daemon's last
    /// rfkill recovery round; nil before any, and after a restart. Rounds
    /// are paced: the next comes at once only once the adapter stayed usable
    /// for 30 s, else 30 s after the block (no tug of war with a program
    /// that blocks again), so a fault within that time expects a paced one.
    private var lastRfkillRound: ContinuousClock.Instant?
    private var rfkillRoundPaced: Bool {
        lastRfkillRound.map { $0.duration(to: .now) < .seconds(30) } ?? false
    }
    private var incarnations: [Incarnation] = []

    /// One run of the daemon process, with what was sampled of it.
    struct Incarnation {
        var pid: pid_t
        var start: ContinuousClock.Instant
        var samples: [(at: ContinuousClock.Instant, rssKiB: Int, fds: Int)] = []
    }

    init(duration: Duration, notifyRate: Double, seed: UInt64, keepFiles: Bool, only: Set<SoakFault> = []) throws {
        self.only = only
        self.duration = duration
        self.notifyRate = notifyRate
        self.seed = seed
        self.keepFiles = keepFiles
        random = SplitMix64(seed: seed)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tether-soak-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    private var readingsDirectory: String { directory.appendingPathComponent("readings").path }
    private var eventLogPath: String { directory.appendingPathComponent("simulator.jsonl").path }
    private var daemonLogPath: String { directory.appendingPathComponent("daemon.log").path }
    /// The simulator's rfkill (`simulate --rfkill`), which the daemon reads.
    private var rfkillDirectory: String { directory.appendingPathComponent("rfkill").path }

    func say(_ text: String) {
        let elapsed = started.duration(to: .now)
        let seconds = elapsed.inSeconds
        FileHandle.standardOutput.write(Data((String(format: "soak %7.1fs | ", seconds) + text + "\n").utf8))
    }

    func run() async -> Bool {
        defer { tearDown() }
        do {
            try await setUp()
            try await injectFaults()
            return try await finish()
        } catch {
            say("FAILED: \(error)")
            return false
        }
    }

    // MARK: Set-up and tear-down

    private func setUp() async throws {
        devTool = try SimulatorRemote.selfPath()
        tether = try SimulatorRemote.tetherPath()
        say("seed \(seed) (replay with --seed \(seed)); directory \(directory.path)")
        try FileManager.default.createDirectory(atPath: readingsDirectory, withIntermediateDirectories: true)
        prepareDiskFull()
        let busDaemon = try BusDaemonProcess(directory: directory.appendingPathComponent("bus"))
        bus = busDaemon
        simulatorProcess = try ChildProcess(executable: devTool, arguments: [
            "simulate", "--bus", busDaemon.address, "--sleep-after", "6s", "--notify-rate", "\(notifyRate)",
            "--event-log", eventLogPath, "--rfkill", rfkillDirectory, "--pairing", "just-works",
            "--other-advertisers", "\(Self.otherAdvertisers)",
        ], stdoutPath: "/dev/null", stderrPath: directory.appendingPathComponent("simulator.log").path)
        let control = SimulatorRemote(bus: try await Bus.connect(address: busDaemon.address))
        remote = control
        guard await waitFor(.seconds(10), { await control.isUp() }) else { throw SoakError("the simulator did not start") }
        try config.write(toFile: configPath, atomically: false, encoding: .utf8)
        try startDaemon()
        guard await waitOnline(within: .seconds(20)) != nil else { throw SoakError("the daemon never came online") }
        say("online; injecting faults for \(DurationText.format(duration)) at \(notifyRate) notifications/s")
    }

    /// A small tmpfs as the readings directory, which the soak can fill.
    private func prepareDiskFull() {
        guard getuid() == 0 else {
            diskFullSkipReason = "not root: cannot mount a tmpfs to fill"
            return
        }
        let mount = try? ChildProcess(
            executable: "/bin/mount", arguments: ["-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", readingsDirectory]
        )
        guard let mount, ChildProcess.exitCode(mount.wait()) == 0 else {
            diskFullSkipReason = "mount -t tmpfs failed (no CAP_SYS_ADMIN here?)"
            return
        }
        diskFullUsable = true
    }

    private func tearDown() {
        daemon?.signal(SIGKILL)
        daemon?.wait()
        simulatorProcess?.terminate()
        bus?.stop()
        let filler = directory.appendingPathComponent("readings/filler").path
        unlink(filler)
        if diskFullUsable, let umount = try? ChildProcess(executable: "/bin/umount", arguments: [readingsDirectory]) {
            umount.wait()
        }
        if !keepFiles { try? FileManager.default.removeItem(at: directory) }
    }

    private var configPath: String { directory.appendingPathComponent("tether.toml").path }

    private var config: String {
        """
        [bluez]
        # By address, as a gateway should: adapter-renumbered moves it between hci0 and hci1.
        adapter = "\(SimulatorOptions().adapterAddress)"

        [dongle]
        address = "AA:BB:CC:DD:EE:FF"
        silence_limit = "\(DurationText.format(Self.silenceLimit))"
        pairing = "just-works"

        [keepalive]
        interval = "2s"
        timeout = "1s"
        sleep_after = "6s"

        [reconnect]
        first_delay = "0s"
        initial_backoff = "300ms"
        max_backoff = "3s"
        connect_timeout = "4s"
        window = "30s"
        window_attempts = \(Self.windowAttempts)
        cooldown = "10s"
        escalate = ["power-cycle", "rfkill-unblock"]

        [readings]
        directory = "\(readingsDirectory)"
        flush_interval = "1s"
        max_backlog = 100000
        """
    }

    private func startDaemon() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = bus?.address ?? ""
        environment["TETHER_RFKILL_DEVICE"] = rfkillDirectory + "/rfkill"
        environment["TETHER_RFKILL_SYSFS"] = rfkillDirectory + "/class-rfkill"
        let process = try ChildProcess(
            executable: tether, arguments: ["run", "--config", configPath], environment: environment,
            stderrPath: daemonLogPath
        )
        daemon = process
        incarnations.append(Incarnation(pid: process.pid, start: .now))
    }

    // MARK: Faults

    private func injectFaults() async throws {
        let end = started + duration
        // Kills at fixed points of the first 40 %, so that the last daemon
        // lives long enough for its memory to be judged: one per 2.5 minutes.
        let kills = max(1, Int(duration.components.seconds / 150))
        var killTimes = (1...kills).map { started + duration * (0.4 * Double($0) / Double(kills)) }
        let sampler = Task { await self.sample() }
        defer { sampler.cancel() }
        while ContinuousClock.now + .seconds(15) < end {
            // Faults come 11–16 s apart: a link that stayed up 10 s is
            // stable, so each drop starts a fresh retry window. Closer
            // together, the supervisor rightly treats the link as flapping
            // and backs off, which is a different test.
            try await Task.sleep(for: .milliseconds(Int.random(in: 11_000...16_000, using: &random)))
            let fault: SoakFault
            if let next = killTimes.first, ContinuousClock.now >= next {
                killTimes.removeFirst()
                fault = .killDaemon
            } else {
                let candidates = SoakFault.allCases.filter {
                    $0 != .killDaemon && ($0 != .diskFull || diskFullUsable) && (only.isEmpty || only.contains($0))
                }
                guard let pick = candidates.randomElement(using: &random) else { continue }
                fault = pick
            }
            faults[fault, default: 0] += 1
            try await inject(fault)
            // Recovery counts from the end of the fault (an adapter kept off
            // for 2 s cannot recover sooner).
            let injected = ContinuousClock.now
            // A lockup is only seen as failing attempts: the window (30 s)
            // runs out before the power cycle (47.5 s in a run of seed 7).
            let limit: Duration = fault == .lockup ? .seconds(90) : .seconds(60)
            guard let online = await waitOnline(within: limit) else {
                violations.append("no recovery within \(DurationText.rounded(limit)) after \(fault.rawValue)")
                say("VIOLATION: not online \(DurationText.rounded(limit)) after \(fault.rawValue)")
                if fault == .lockup { try await checkLockupCleared() }
                continue
            }
            let took = injected.duration(to: online)
            recoveries.append(took)
            say("\(fault.rawValue): online again after \(DurationText.rounded(took))")
            if fault == .parked || fault == .firmwareUpdate, took > Self.backAfterParking {
                violations.append("online \(DurationText.rounded(took)) after the \(fault == .parked ? "parked" : "updated") dongle advertised again (goal: \(DurationText.rounded(Self.backAfterParking)))")
                say("VIOLATION: back \(DurationText.rounded(took)) after the dongle returned")
            }
            if fault == .lockup { try await checkLockupCleared() }
            if fault == .bondLost { checkPairedAgain() }
        }
        // A long fault (a 50 s firmware update) can push the kill so late
        // that the last daemon lives only seconds: it then runs on past
        // the duration until its memory can be judged.
        if let last = incarnations.last {
            let judgeable = last.start + Self.lastDaemonLife
            if ContinuousClock.now < judgeable {
                say("the last daemon has lived \(DurationText.rounded(last.start.duration(to: .now))); the soak runs on until it has lived \(DurationText.rounded(Self.lastDaemonLife)), for its memory to be judged")
                try await Task.sleep(until: judgeable)
            }
        }
    }

    /// How long the last daemon lives at least, so that its memory and
    /// descriptors are sampled often enough (once a second) to be judged.
    static let lastDaemonLife: Duration = .seconds(30)

    /// After a lost bond: online again means paired again (the dongle
    /// refuses the old bond), never more than once for it.
    private func checkPairedAgain() {
        let events = simulatorEvents()
        guard let forgotten = events.last(where: { $0.ev == "keys-forgotten" }) else { return }
        let pairings = events.filter { $0.ev == "paired" && $0.t > forgotten.t }.count
        if pairings != 1 {
            violations.append("\(pairings) pairings after the dongle lost its keys (expected one)")
            say("VIOLATION: \(pairings) pairings after the lost bond")
        } else {
            say("bond-lost: paired again once")
        }
    }

    /// After a lockup: Tether's power-cycle step must have ended it.
    private func checkLockupCleared() async throws {
        let cleared = simulatorEvents().last { $0.ev == "controller-lockup" }
        guard cleared?.on == false else {
            violations.append("the controller lockup was not cleared by a power cycle")
            say("VIOLATION: still locked up; the soak ends the lockup itself")
            try await remote?.knob("Lockup", [.boolean(false), .boolean(true)])
            return
        }
        say("lockup: cleared by \(cleared?.reason ?? "?")")
    }

    private func inject(_ fault: SoakFault) async throws {
        guard let remote else { return }
        switch fault {
        case .drop:
            let reason = SoakFault.dropReasons.randomElement(using: &random) ?? "timeout"
            say("drop (\(reason))")
            try await remote.knob("DropLink", [.string(reason)])
        case .failingConnects:
            let error = SoakFault.connectErrors.randomElement(using: &random) ?? SoakFault.connectErrors[0]
            let count = UInt32.random(in: 1...4, using: &random)
            say("the next \(count) connects fail with \(error.name): \(error.message), then a drop")
            try await remote.knob("FailConnects", [.uint32(count), .string(error.name), .string(error.message)])
            try await remote.knob("DropLink", [.string("remote")])
        case .inProgress:
            say("the next connect fails with InProgress, then a drop")
            try await remote.knob("FailConnects", [.uint32(1), .string("org.bluez.Error.InProgress"), .string("In Progress")])
            try await remote.knob("DropLink", [.string("timeout")])
        case .bluezCrash:
            let after = UInt32.random(in: 300...2000, using: &random)
            say("bluetoothd crashes, back after \(after) ms")
            try await remote.knob("Crash", [.uint32(after)])
        case .bluezRestart:
            let after = UInt32.random(in: 300...1500, using: &random)
            say("bluetoothd restarts gracefully, back after \(after) ms")
            try await remote.knob("Restart", [.uint32(after)])
        case .bluezHang:
            let hang = UInt32.random(in: 1500...4000, using: &random)
            say("bluetoothd hangs for \(hang) ms")
            try await remote.knob("Hang", [.uint32(hang)])
            try await Task.sleep(for: .milliseconds(Int(hang)))
        case .adapterOff:
            let off = Int.random(in: 1000...3000, using: &random)
            say("adapter powered off for \(off) ms")
            try await remote.knob("SetAdapterPowered", [.boolean(false)])
            try await Task.sleep(for: .milliseconds(off))
            try await remote.knob("SetAdapterPowered", [.boolean(true)])
        case .latencySpike:
            let latency = UInt32.random(in: 1500...3000, using: &random)
            say("connect latency \(latency) ms, then a drop")
            try await remote.knob("SetConnectLatency", [.uint32(latency)])
            try await remote.knob("DropLink", [.string("timeout")])
            _ = await waitOnline(within: .seconds(30))
            try await remote.knob("SetConnectLatency", [.uint32(30)])
        case .killDaemon:
            let margin = UInt64(notifyRate * 0.2) + 1
            let before = try await remote.sequence()
            daemon?.signal(SIGKILL)
            daemon?.wait()
            let pause = Int.random(in: 500...2000, using: &random)
            say("kill -9 of the daemon; restart after \(pause) ms")
            try await Task.sleep(for: .milliseconds(pause))
            try startDaemon()
            lastRfkillRound = nil
            _ = await waitOnline(within: .seconds(30))
            let after = try await remote.sequence()
            killWindows.append(before.subtractingClamped(margin)...after)
        case .hungApplication:
            let attAnswers = Bool.random(using: &random)
            let drops = disconnectRequests()
            say("the dongle's application hangs (\(attAnswers ? "its stack answers ATT" : "ATT unanswered too"))")
            try await remote.knob("HangApplication", [.boolean(attAnswers)])
            let hung = ContinuousClock.now
            // The last notification left at most 1/rate before the hang.
            let bound = Self.silenceLimit + .seconds(3)
            if await waitFor(bound, { self.disconnectRequests() > drops }) {
                say("hung-application: the silent link dropped \(DurationText.rounded(hung.duration(to: .now))) after the hang")
            } else {
                violations.append("still holding a silent link \(DurationText.rounded(bound)) after the application hung")
                say("VIOLATION: no Disconnect within \(DurationText.rounded(bound)) of the hang")
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: 500...4000, using: &random)))
            try await remote.knob("ResumeApplication")
        case .gattChanged:
            say("the dongle's GATT layout changes while connected (Service Changed)")
            try await remote.knob("ChangeGattLayout")
        case .staleDevice:
            say("the device object goes stale, then a drop")
            try await remote.knob("SetStaleDevice", [.boolean(true)])
            try await remote.knob("DropLink", [.string("timeout")])
        case .adapterRenumbered:
            let away = Int.random(in: 500...2000, using: &random)
            adapterIndex = 1 - adapterIndex
            say("the controller leaves for \(away) ms and comes back as hci\(adapterIndex)")
            try await remote.knob("RemoveAdapter")
            try await Task.sleep(for: .milliseconds(away))
            try await remote.knob("AddAdapter", [.string("hci\(adapterIndex)"), .string(SimulatorOptions().adapterAddress)])
            // Unusable for a moment: rounds before count on if it comes back within 30 s.
            if lastRfkillRound != nil { lastRfkillRound = .now }
        case .rfkillSoft:
            let paced = rfkillRoundPaced
            let within: Duration = paced ? .seconds(35) : .seconds(5)
            say("rfkill soft block (airplane mode); Tether clears it with rfkill-unblock"
                + (paced ? " (a paced round: 30 s after the block)" : ""))
            let writes = rfkillUnblockWrites()
            let blocked = ContinuousClock.now
            try await remote.knob("Rfkill", [.string("soft")])
            if await waitFor(within, { self.rfkillUnblockWrites() > writes }) {
                say("rfkill-soft: Tether unblocked it \(DurationText.rounded(blocked.duration(to: .now))) after the block")
            } else {
                violations.append("a soft block not cleared by Tether's rfkill-unblock within \(DurationText.rounded(within))")
                say("VIOLATION: the soft block is still there \(DurationText.rounded(within)) later; the soak lifts it")
                try await remote.knob("Rfkill", [.string("none")])
            }
            lastRfkillRound = .now
        case .rfkillSoftHeld:
            let hold = Int.random(in: 2000...5000, using: &random)
            say("rfkill soft block held for \(hold) ms by another program (blocked again at once after an unblock)")
            let writes = rfkillUnblockWrites()
            let paced = rfkillRoundPaced
            try await remote.knob("Rfkill", [.string("soft-held")])
            try await Task.sleep(for: .milliseconds(hold))
            // One round at once (none yet if paced), the next no sooner than 30 s: no loop.
            let unblocks = rfkillUnblockWrites() - writes
            if unblocks != (paced ? 0 : 1) {
                violations.append("Tether wrote \(unblocks) unblocks during a held soft block of \(hold) ms (one round, the next 30 s later)")
                say("VIOLATION: \(unblocks) unblocks while the block was held")
            }
            say("the soak lifts the soft block")
            try await remote.knob("Rfkill", [.string("none")])
            lastRfkillRound = .now
        case .rfkillHard:
            let hold = Int.random(in: 1000...3000, using: &random)
            say("rfkill hard block for \(hold) ms")
            let writes = rfkillUnblockWrites()
            try await remote.knob("Rfkill", [.string("hard")])
            try await Task.sleep(for: .milliseconds(hold))
            try await remote.knob("Rfkill", [.string("none")])
            if lastRfkillRound != nil { lastRfkillRound = .now }
            let events = simulatorEvents()
            if rfkillUnblockWrites() > writes {
                violations.append("Tether wrote an rfkill unblock during a hard block")
                say("VIOLATION: an unblock during the hard block")
            }
            // No attempt while it lasts (one may race the power-off, a known limit).
            if let start = events.last(where: { $0.ev == "rfkill" && $0.reason == "hard" })?.t,
               let end = events.last(where: { $0.ev == "rfkill" && $0.reason == "none" })?.t {
                let attempts = events.filter { $0.ev == "connect-request" && $0.t > start + 500 && $0.t < end }.count
                if attempts > 0 {
                    violations.append("\(attempts) connect attempts during a hard block")
                    say("VIOLATION: \(attempts) connect attempts during the hard block")
                }
            }
        case .bondLost:
            say("the dongle forgets its keys and drops the link; Tether must remove the bond and pair again")
            try await remote.knob("ForgetKeys", [])
            try await remote.knob("DropLink", [.string("remote")])
        case .parked:
            let seconds = Int.random(in: 40...55, using: &random)
            say("the vehicle parks: the dongle stops advertising for \(seconds) s among \(Self.otherAdvertisers) other advertisers")
            let before = daemonLogLines()
            try await remote.knob("Sleep", [])
            try await Task.sleep(for: .seconds(seconds))
            let during = daemonLogLines().dropFirst(before.count)
            let steps = during.filter { $0.contains("→ escalating") }.count
            let exhausted = during.filter { $0.contains("event=window-exhausted") }.count
            let away = during.contains { $0.contains("event=away") }
            if steps > 0 || exhausted > 0 || !away {
                violations.append("parked: \(steps) escalations, \(exhausted) exhausted windows, away said \(away ? "once" : "never") (expected 0, 0, once)")
                say("VIOLATION: parked handled as a fault (\(steps) escalations, \(exhausted) exhausted windows, away said: \(away))")
            } else {
                say("parked: away, no controller step, \(during.count) journal lines while away")
            }
            try await remote.knob("Wake", [])
        case .firmwareUpdate:
            // Longer than the retry window (30 s), after which Tether scans:
            // a DFU of a Nordic application takes about as long.
            let seconds = Int.random(in: 40...55, using: &random)
            say("the dongle's firmware is updated: its DFU bootloader (DfuTarg) advertises for \(seconds) s")
            let before = daemonLogLines()
            try await remote.knob("SetBootloader", [.boolean(true)])
            try await Task.sleep(for: .seconds(seconds))
            let during = daemonLogLines().dropFirst(before.count)
            let steps = during.filter { $0.contains("→ escalating") }.count
            let said = during.filter { $0.contains("event=dongle-in-bootloader") }.count
            let tried = (try? SimulatorEvent.readLog(path: eventLogPath))?.filter { $0.ev == "connect-request" && $0.reason == "bootloader" }.count ?? 0
            if steps > 0 || said != 1 || tried > 0 {
                violations.append("firmware update: \(steps) escalations, bootloader said \(said) times, \(tried) connects to it (expected 0, 1, 0)")
                say("VIOLATION: firmware update (\(steps) escalations, said \(said) times, \(tried) connects to the bootloader)")
            } else {
                say("firmware update: the bootloader said once, never connected to, no controller step")
            }
            try await remote.knob("SetBootloader", [.boolean(false)])
        case .lockup:
            say("the controller locks up (calls fail or hang, Powered stays true) until a power cycle")
            try await remote.knob("Lockup", [.boolean(true), .boolean(true)])
        case .diskFull:
            let seconds = Int.random(in: 3...6, using: &random)
            say("the readings disk is full for \(seconds) s")
            try fillDisk()
            try await Task.sleep(for: .seconds(seconds))
            unlink(directory.appendingPathComponent("readings/filler").path)
        }
    }

    /// The simulator's event log so far.
    private func simulatorEvents() -> [SimulatorEvent] {
        (try? SimulatorEvent.readLog(path: eventLogPath)) ?? []
    }

    /// Unblocks the daemon wrote to the simulator's rfkill (its rfkill-unblock step).
    private func rfkillUnblockWrites() -> Int {
        simulatorEvents().filter { $0.ev == "rfkill" && $0.type == "client" }.count
    }

    /// Device1.Disconnect calls the simulator has seen (the daemon dropping a link).
    private func disconnectRequests() -> Int {
        ((try? SimulatorEvent.readLog(path: eventLogPath)) ?? []).filter { $0.ev == "disconnect-request" }.count
    }

    /// Takes every free byte of the readings tmpfs with one file.
    private func fillDisk() throws {
        var info = statvfs()
        guard statvfs(readingsDirectory, &info) == 0 else { throw SoakError("statvfs: \(String(cString: strerror(errno)))") }
        let free = off_t(info.f_bavail) * off_t(info.f_frsize)
        let fd = open(directory.appendingPathComponent("readings/filler").path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SoakError("cannot create the filler: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        _ = posix_fallocate(fd, 0, free)
    }

    // MARK: Observation

    /// Online: the dongle connected and a reading newer than the wait's start on disk.
    private func waitOnline(within limit: Duration) async -> ContinuousClock.Instant? {
        guard let remote else { return nil }
        let before = (try? await remote.sequence()) ?? 0
        let ok = await waitFor(limit) {
            guard (try? await remote.state()) == "connected" else { return false }
            return self.lastSequenceOnDisk() > before
        }
        return ok ? .now : nil
    }

    /// The newest notification sequence number in the newest readings file.
    private func lastSequenceOnDisk() -> UInt64 {
        let reader = try? ReadingLogReader(directory: readingsDirectory, since: Date().addingTimeInterval(-5))
        var newest: UInt32 = 0
        let decoder = JSONDecoder()
        _ = try? reader?.readAvailable { batch in
            for line in batch.split(separator: UInt8(ascii: "\n")) {
                if let record = try? decoder.decode(ReadingRecord.self, from: Data(line)) {
                    newest = max(newest, SimulatorRemote.sequences(in: [record]).first ?? 0)
                }
            }
        }
        return UInt64(newest)
    }

    private func waitFor(_ limit: Duration, _ condition: () async -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return await condition()
    }

    /// Every second: the daemon's resident memory and open descriptors.
    private func sample() async {
        while !Task.isCancelled {
            if let pid = daemon?.pid, let rss = Self.rssKiB(pid), let fds = Self.openDescriptors(pid) {
                if let last = incarnations.indices.last, incarnations[last].pid == pid {
                    incarnations[last].samples.append((.now, rss, fds))
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    static func rssKiB(_ pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
        return line?.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    static func openDescriptors(_ pid: pid_t) -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }

    // MARK: Verdict

    private func finish() async throws -> Bool {
        // The dongle goes quiet first: a notification sent while the daemon
        // is leaving the bus reaches nobody (a 10-minute run lost its very
        // last one that way), and that is a stop, not a loss.
        try await remote?.knob("SetNotifyRate", [.double(0)])
        try await Task.sleep(for: .seconds(3))  // the last readings reach the disk
        let status = daemon?.terminate(grace: .seconds(15)) ?? -1
        daemon = nil
        if ChildProcess.exitCode(status) != 0 { violations.append("the daemon's exit status after SIGTERM was \(status), not 0") }
        simulatorProcess?.terminate()
        simulatorProcess = nil

        let events = try SimulatorEvent.readLog(path: eventLogPath)
        let sent = events.filter { $0.ev == "notify" }.compactMap(\.seq)
        // The soak's own parked spells (the Sleep knob: reason "sleep") excepted.
        let sleeps = events.filter { $0.ev == "sleep" && $0.reason != "sleep" }.count
        let records = try ReadingLog.readRecords(directory: readingsDirectory)
        let onDisk = SimulatorRemote.sequences(in: records)
        let gaps = records.filter { $0.source == "gap" }.count
        let missing = Set(sent).subtracting(onDisk)
        let excused = missing.filter { seq in killWindows.contains { $0.contains(UInt64(seq)) } }
        let lost = missing.subtracting(excused)
        let doubled = onDisk.count - Set(onDisk).count
        if sleeps > 0 { violations.append("the dongle fell asleep \(sleeps) times") }
        if !lost.isEmpty { violations.append("\(lost.count) readings lost outside the kill windows (first: \(lost.sorted().prefix(5)))") }
        if doubled > 0 { violations.append("\(doubled) readings written twice") }
        if gaps > 0 { violations.append("\(gaps) gap records: the backlog overflowed") }
        let seqs = records.map(\.seq)
        if seqs != Array(seqs.sorted()) || Set(seqs).count != seqs.count { violations.append("record seq not strictly increasing") }

        let memory = memoryGrowth()
        if let memory, memory.growthKiB >= 2048 { violations.append("RSS grew \(memory.growthKiB) KiB (limit 2048)") }
        if let memory, memory.fdsEnd > memory.fdsStart + 2 { violations.append("open descriptors grew from \(memory.fdsStart) to \(memory.fdsEnd)") }
        if memory == nil { violations.append("too few memory samples of the last daemon") }

        let attempts = maximumAttempt()
        if attempts > Self.windowAttempts { violations.append("attempt \(attempts) in a window of \(Self.windowAttempts)") }
        let burst = busiestTenSeconds(events.filter { $0.ev == "connect-request" }.map(\.t))
        // A window's attempts, plus the one after an escalation step and a blind one.
        if burst > Self.windowAttempts + 3 { violations.append("\(burst) connect attempts within 10 s: a busy loop") }

        let sorted = recoveries.sorted()
        func percentile(_ p: Double) -> String {
            sorted.isEmpty ? "-" : DurationText.rounded(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
        }
        say("---- summary (seed \(seed)) ----")
        say("faults: " + faults.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) \($0.value)" }.joined(separator: ", "))
        if let reason = diskFullSkipReason { say("disk-full skipped: \(reason)") }
        say("recovery after a fault: median \(percentile(0.5)), p95 \(percentile(0.95)), max \(sorted.last.map(DurationText.rounded) ?? "-")")
        say("readings: \(sent.count) sent, \(records.count) records on disk, \(excused.count) missing inside \(killWindows.count) kill windows, \(lost.count) lost outside, \(doubled) doubled, \(gaps) gap records")
        say("the dongle fell asleep \(sleeps) times")
        if let memory {
            say("last daemon: RSS \(memory.rssStartKiB) KiB at \(DurationText.rounded(memory.from)) → \(memory.rssEndKiB) KiB at the end (growth \(memory.growthKiB) KiB); descriptors \(memory.fdsStart) → \(memory.fdsEnd)")
        }
        say("retries: highest attempt in a window \(attempts) (limit \(Self.windowAttempts)); busiest 10 s \(burst) connect attempts")
        for violation in violations { say("VIOLATION: \(violation)") }
        say(violations.isEmpty ? "soak passed" : "soak FAILED")
        return violations.isEmpty
    }

    /// The last daemon's memory from 2 minutes into its life (or a third of
    /// it, for a short soak) to its last sample.
    private func memoryGrowth() -> (from: Duration, rssStartKiB: Int, rssEndKiB: Int, growthKiB: Int, fdsStart: Int, fdsEnd: Int)? {
        guard let last = incarnations.last, let end = last.samples.last, last.samples.count >= 10 else { return nil }
        let life = last.start.duration(to: end.at)
        let from = min(.seconds(120), life / 3)
        guard let start = last.samples.first(where: { last.start.duration(to: $0.at) >= from }) else { return nil }
        return (from, start.rssKiB, end.rssKiB, end.rssKiB - start.rssKiB, start.fds, end.fds)
    }

    /// Other devices advertising near the simulated dongle (the evidence
    /// that the controller works while the dongle is parked).
    static let otherAdvertisers = 3
    /// How soon after a parked dongle advertises again Tether must be online.
    static let backAfterParking: Duration = .seconds(2)

    /// The daemon's log so far, line by line.
    private func daemonLogLines() -> [Substring] {
        guard let log = try? String(contentsOfFile: daemonLogPath, encoding: .utf8) else { return [] }
        return log.split(separator: "\n")
    }

    /// The highest `attempt=N` the daemon logged.
    private func maximumAttempt() -> Int {
        guard let log = try? String(contentsOfFile: daemonLogPath, encoding: .utf8) else { return 0 }
        var highest = 0
        for line in log.split(separator: "\n") where line.contains("event=reconnect-attempt") {
            if let field = line.split(separator: " ").first(where: { $0.hasPrefix("attempt=") }),
               let n = Int(field.dropFirst("attempt=".count)) {
                highest = max(highest, n)
            }
        }
        return highest
    }

    private func busiestTenSeconds(_ times: [Double]) -> Int {
        var best = 0
        var start = 0
        for end in times.indices {
            while times[end] - times[start] > 10_000 { start += 1 }
            best = max(best, end - start + 1)
        }
        return best
    }
}

struct SoakError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension UInt64 {
    fileprivate func subtractingClamped(_ other: UInt64) -> UInt64 { self > other ? self - other : 0 }
}
