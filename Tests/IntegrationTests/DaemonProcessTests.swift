import ChildProcess
import DBus
import Foundation
import Readings
import Simulator
import TestSupport
import Testing

/// The `tether` binary as a process: crash safety and exit codes.
@Suite(.serialized) struct DaemonProcessTests {
    /// The `tether` executable built next to this test bundle.
    static var tetherPath: String {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = bundle.deletingLastPathComponent()
        // The bundle may be a directory on some platforms; walk up to the bin dir.
        while !FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent("tether").path),
              directory.path != "/"
        {
            directory = directory.deletingLastPathComponent()
        }
        return directory.appendingPathComponent("tether").path
    }

    static func writeConfig(_ harness: DaemonHarness) throws -> String {
        let path = harness.directory.url.appendingPathComponent("tether.toml").path
        try """
        [dongle]
        address = "\(DaemonHarness.address)"
        [keepalive]
        interval = "1s"
        timeout = "800ms"
        sleep_after = "3s"
        [reconnect]
        initial_backoff = "200ms"
        max_backoff = "1s"
        connect_timeout = "2s"
        [readings]
        directory = "\(harness.readingsDirectory)"
        flush_interval = "1s"
        """.write(toFile: path, atomically: false, encoding: .utf8)
        return path
    }

    func startDaemon(_ harness: DaemonHarness, config: String) throws -> ChildProcess {
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = harness.busDaemon.address
        return try ChildProcess(
            executable: Self.tetherPath, arguments: ["run", "--config", config], environment: environment,
            stderrPath: harness.directory.url.appendingPathComponent("daemon.log").path
        )
    }

    @Test func killMinusNineLosesNothingOlderThan200msAndSeqContinues() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 100
        let harness = try await DaemonHarness(simulator: options)
        let config = try Self.writeConfig(harness)
        var daemon = try startDaemon(harness, config: config)
        #expect(await eventually { await harness.simulator.state == .connected && harness.sequencesSent().count > 100 })
        try await Task.sleep(for: .seconds(1))
        let sentBefore = await harness.simulator.lastSequence
        try await Task.sleep(for: .milliseconds(200))
        daemon.signal(SIGKILL)
        daemon.wait()

        let afterKill = try harness.records()
        let seqsAfterKill = afterKill.map(\.seq)
        let received = try harness.sequencesOnDisk()
        let missing = Set(1...sentBefore).subtracting(received)
        print("figure: kill -9: \(sentBefore) sent more than 200 ms before the kill, \(received.count) on disk, \(missing.count) missing")
        #expect(missing.isEmpty, "\(missing.count) readings sent more than 200 ms before the kill are not on disk")

        // Restart: the files parse, seq continues after the last good record.
        daemon = try startDaemon(harness, config: config)
        #expect(await eventually { ((try? harness.records().count) ?? 0) > afterKill.count + 50 })
        let status = daemon.terminate()
        let all = try harness.records()
        let log = (try? String(contentsOfFile: harness.directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? ""
        await harness.stop()

        #expect(ChildProcess.exitCode(status) == 0, "exit status after SIGTERM; log:\n\(log.suffix(2000))")
        let seqs = all.map(\.seq)
        #expect(seqs == Array(1...UInt64(seqs.count)), "seq must continue without gaps or repeats")
        #expect(seqs.prefix(seqsAfterKill.count).elementsEqual(seqsAfterKill))
    }

    /// `tether run` stamps every reading with this boot's identity, the time
    /// since boot taken with its `ts`, and the kernel's clock status
    /// (docs/operations.md, "Dating readings").
    @Test func everyReadingCarriesTheBootItWasTakenInAndTheTimeSinceIt() async throws {
        let harness = try await DaemonHarness()
        let config = try Self.writeConfig(harness)
        func sinceBoot() -> UInt64 {
            var now = timespec()
            clock_gettime(CLOCK_BOOTTIME, &now)
            return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
        }
        let before = sinceBoot()
        let daemon = try startDaemon(harness, config: config)
        #expect(await eventually { ((try? harness.records().count) ?? 0) > 20 })
        // A step of the system clock (to what it reads: microseconds) is
        // said once in the journal; setting it needs CAP_SYS_TIME.
        var wall = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        let logPath = harness.directory.url.appendingPathComponent("daemon.log").path
        if clock_settime(CLOCK_REALTIME, &wall) == 0 {
            #expect(await eventually {
                let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                return log.contains("the system clock was set forward by 0.0") || log.contains("the system clock was set back by 0.0")
            })
        } else {
            print("not checked: the clock-set line (setting the clock needs CAP_SYS_TIME)")
        }
        _ = daemon.terminate()
        let after = sinceBoot()
        let records = try harness.records()
        await harness.stop()
        let bootID = try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let synchronised = BootClock.system().now()?.clockSynchronised
        #expect(!records.isEmpty)
        for record in records {
            #expect(record.version == 2)
            #expect(record.bootID == bootID)
            #expect(record.clockSynchronised == synchronised)
            let milliseconds = try #require(record.bootMilliseconds)
            #expect((before...after).contains(milliseconds), "boot_ms \(milliseconds) outside the run, \(before)...\(after)")
        }
        let times = records.compactMap(\.bootMilliseconds)
        #expect(times == times.sorted(), "time since boot never goes back across the records")
        // ts and boot_ms were read together: their difference is the same to
        // the clock's resolution and the milliseconds both are cut to.
        let starts = records.compactMap { record in
            UTCTimestamp.milliseconds(record.ts).map { $0 - Int64(record.bootMilliseconds ?? 0) }
        }
        #expect((starts.max() ?? 0) - (starts.min() ?? 0) <= 5, "ts − boot_ms varies by \((starts.max() ?? 0) - (starts.min() ?? 0)) ms")
    }

    /// The daemon runs on threads of its own and none of libdispatch's: once
    /// a dispatch worker thread has run, libdispatch wakes the process every
    /// second for good (its pool monitor), so an idle daemon would not sleep.
    /// Everything that used the global pool runs here: start-up, readings
    /// written and synced, the metrics file, a control call, the log.
    @Test func theDaemonRunsOnItsOwnThreadsAndNoneOfLibdispatchs() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 20
        let harness = try await DaemonHarness(simulator: options)
        let metrics = harness.directory.url.appendingPathComponent("tether.prom").path
        let config = try Self.writeConfig(harness)
        let withMetrics = try String(contentsOfFile: config, encoding: .utf8) + "\n[metrics]\ntextfile = \"\(metrics)\"\ninterval = \"1s\"\n"
        try withMetrics.write(toFile: config, atomically: false, encoding: .utf8)
        let daemon = try startDaemon(harness, config: config)
        let log = { (try? String(contentsOfFile: harness.directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? "" }
        #expect(await eventually { ((try? harness.records().count) ?? 0) > 40 && FileManager.default.fileExists(atPath: metrics) })
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        let status = try await tether.run(["status", "--json"])
        #expect(status.status == 0, "tether status: \(status.all)")
        try await Task.sleep(for: .seconds(2))

        let names = try Self.threadNames(of: daemon.pid)
        let ours: Set = ["tether", "tether-main", "tether-io", "tether-disk", "tether-log"]
        let foreign = names.filter { !ours.contains($0) }
        print("figure: tether run's threads: \(names.sorted().joined(separator: ", "))")
        #expect(foreign.isEmpty, "threads that are not Tether's own: \(foreign)")
        #expect(names.filter { $0 == "tether" }.count == 2, "the main thread and the loop: \(names)")

        let exit = daemon.terminate()
        await harness.stop()
        #expect(ChildProcess.exitCode(exit) == 0, "exit status after SIGTERM; log:\n\(log().suffix(2000))")
    }

    /// The names of a process's threads (`/proc/PID/task/*/comm`).
    static func threadNames(of pid: pid_t) throws -> [String] {
        let tasks = "/proc/\(pid)/task"
        return try FileManager.default.contentsOfDirectory(atPath: tasks).map { tid in
            ((try? String(contentsOfFile: "\(tasks)/\(tid)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// SIGHUP (an operator expecting a reload) and SIGPIPE (a write to a
    /// reader that went) end a process by default, and systemd counts such
    /// an end as clean: `Restart=on-failure` would not restart it.
    @Test func aHangupOrABrokenPipeSignalDoesNotStopTheDaemon() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        let config = try Self.writeConfig(harness)
        let daemon = try startDaemon(harness, config: config)
        let log = { (try? String(contentsOfFile: harness.directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? "" }
        #expect(await eventually { ((try? harness.records().count) ?? 0) > 20 })
        daemon.signal(SIGHUP)
        daemon.signal(SIGPIPE)
        try await Task.sleep(for: .milliseconds(500))
        let before = (try? harness.records().count) ?? 0
        #expect(daemon.poll() == nil, "the daemon ended: \(log().suffix(1000))")
        #expect(await eventually { ((try? harness.records().count) ?? 0) > before + 20 }, "readings stopped after the signals")
        #expect(log().contains("received SIGHUP: ignored"))
        let status = daemon.terminate()
        let seqs = try harness.records().map(\.seq)
        await harness.stop()
        #expect(ChildProcess.exitCode(status) == 0, "exit status after SIGTERM; log:\n\(log().suffix(2000))")
        #expect(seqs == Array(1...UInt64(seqs.count)), "seq must run without gaps or repeats")
    }

    @Test func theShippedExampleConfigIsValid() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/tether.toml").path
        let process = try ChildProcess(executable: Self.tetherPath, arguments: ["check-config", example], stdoutPath: "/dev/null")
        #expect(ChildProcess.exitCode(process.wait()) == 0)
    }

    @Test func aBadConfigExitsWithExConfig() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("bad.toml").path
        try "[keepalive]\ninterval = \"5 parsecs\"\n".write(toFile: path, atomically: false, encoding: .utf8)
        for arguments in [["check-config", path], ["run", "--config", path]] {
            let process = try ChildProcess(
                executable: Self.tetherPath, arguments: arguments,
                stderrPath: directory.url.appendingPathComponent("err.log").path
            )
            #expect(ChildProcess.exitCode(process.wait()) == 78, "\(arguments)")
        }
        let message = try String(contentsOfFile: directory.url.appendingPathComponent("err.log").path, encoding: .utf8)
        #expect(message.contains("bad.toml"))
    }
}
