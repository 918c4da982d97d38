import ChildProcess
import Foundation
import Readings
import Simulator
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What the test needs of the machine: root, a loop device and an ext4 file
/// system it can freeze (`fsfreeze`), in a mount namespace of its own so
/// nothing outlives the test. Outside the suite because a suite's traits
/// cannot refer to the suite itself.
enum FreezableDiskRequirements {
    static let tools = ["/usr/bin/unshare", "/usr/bin/nsenter", "/usr/sbin/fsfreeze", "/usr/sbin/mkfs.ext4"]

    static let met: Bool = {
        guard geteuid() == 0, tools.allSatisfy(FileManager.default.isExecutableFile(atPath:)),
              let directory = try? TemporaryDirectory()
        else { return false }
        defer { directory.remove() }
        let image = directory.url.appendingPathComponent("probe.img").path
        let mountPoint = directory.url.appendingPathComponent("mnt").path
        let script = """
            set -e
            truncate -s 16M "$1" && mkfs.ext4 -q -F "$1" && mkdir "$2"
            mount -o loop "$1" "$2" && fsfreeze -f "$2" && fsfreeze -u "$2"
            """
        guard let probe = try? ChildProcess(
            executable: "/usr/bin/unshare", arguments: ["-m", "/bin/sh", "-c", script, "sh", image, mountPoint])
        else { return false }
        return ChildProcess.exitCode(probe.wait(timeout: .seconds(30))) == 0
    }()

    static let unmet: Comment =
        "needs root, a loop device and an ext4 it can freeze (unshare -m, nsenter, fsfreeze, mkfs.ext4) to hang the daemon's disk"
}

/// A disk that stops answering (a frozen file system here; an SD card
/// stalled in its own garbage collection, or writeback throttled on a slow
/// card, holds writes the same way) while Tether is online. The keep-alive
/// must not wait for it: the dongle, whose idle-sleep deadline is 3 s here,
/// stays awake and connected through an 8 s hang; `tether status` answers
/// and says the readings are not stored; once the disk answers, everything
/// that waited in memory is written in order, nothing lost or doubled.
///
/// The daemon runs in a mount namespace of its own (`unshare -m`) with a
/// loop-mounted ext4 over its readings directory; the test freezes and
/// thaws it there (`nsenter -m fsfreeze`) and reads it through
/// `/proc/PID/root`.
@Suite(.serialized, .enabled(if: FreezableDiskRequirements.met, FreezableDiskRequirements.unmet))
struct HungDiskTests {
    @Test func aHungDiskNeitherStopsTheKeepAliveNorLosesReadings() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 20
        options.sleepAfter = .seconds(3)
        let harness = try await DaemonHarness(simulator: options)
        let config = try DaemonProcessTests.writeConfig(harness)
        let directory = harness.readingsDirectory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let image = harness.directory.url.appendingPathComponent("readings.img").path
        let format = try ChildProcess(
            executable: "/bin/sh", arguments: ["-c", "truncate -s 32M \"$1\" && mkfs.ext4 -q -F \"$1\"", "sh", image])
        #expect(ChildProcess.exitCode(format.wait(timeout: .seconds(30))) == 0, "mkfs.ext4 failed")
        let script = """
            set -e
            mount -o loop "$1" "$2"
            shift 2
            exec "$@"
            """
        let daemon = try ChildProcess(
            executable: "/usr/bin/unshare",
            arguments: ["-m", "/bin/sh", "-c", script, "sh", image, directory, DaemonProcessTests.tetherPath, "run", "--config", config],
            environment: ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": harness.busDaemon.address]) { $1 },
            stderrPath: harness.directory.url.appendingPathComponent("daemon.log").path
        )
        // A failed expectation below must not leave the daemon running (its
        // pipes would hold the test runner).
        var stopped = false
        defer {
            if !stopped {
                daemon.signal(SIGKILL)
                _ = daemon.wait(timeout: .seconds(5))
            }
        }
        let log = { (try? String(contentsOfFile: harness.directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? "" }
        // The daemon's view of its readings directory (unshare execs: same pid).
        let inside = "/proc/\(daemon.pid)/root\(directory)"
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        func status() async -> [String: Any]? {
            guard let result = try? await tether.run(["status", "--json"], timeout: .seconds(5)), result.status == 0 else { return nil }
            return try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        }
        func fsfreeze(_ flag: String) -> Bool {
            guard let process = try? ChildProcess(
                executable: "/usr/bin/nsenter", arguments: ["-t", "\(daemon.pid)", "-m", "/usr/sbin/fsfreeze", flag, directory])
            else { return false }
            return ChildProcess.exitCode(process.wait(timeout: .seconds(10))) == 0
        }

        let online = await eventually(timeout: .seconds(30), every: .milliseconds(100)) {
            guard let s = await status() else { return false }
            return s["state"] as? String == "online" && (s["readings_written"] as? Int ?? 0) > 20
        }
        #expect(online, "never online with readings on disk:\n\(log().suffix(2000))")
        let connects = await harness.simulator.connectCount
        let writtenBefore = await status()?["readings_written"] as? Int ?? 0

        // Hung for 8 s, more than twice the dongle's idle-sleep deadline.
        try #require(fsfreeze("-f"), "fsfreeze -f failed")
        var thawed = false
        defer { if !thawed { _ = fsfreeze("-u") } }
        let frozenAt = ContinuousClock.now
        var states: Set<String> = []
        var stalled: [String: Any]?
        while ContinuousClock.now - frozenAt < .seconds(8) {
            states.insert("\(await harness.simulator.state)")
            if let s = await status(), s["readings_error"] is String { stalled = s }
            try await Task.sleep(for: .milliseconds(250))
        }
        let stillConnected = await harness.simulator.state == .connected
        thawed = fsfreeze("-u")
        #expect(thawed, "fsfreeze -u failed")

        #expect(states == ["connected"], "the dongle was not kept connected while the disk hung: \(states)")
        #expect(stillConnected)
        #expect(stalled != nil, "status never said the readings are not stored while the disk hung:\n\(log().suffix(2000))")
        let seen = stalled ?? [:]
        #expect((seen["readings_error"] as? String)?.hasPrefix("the disk has not answered a write in \(directory)") == true, "\(seen)")
        #expect(seen["state"] as? String == "online", "the link is fine: only the disk hangs")
        #expect((seen["readings_pending"] as? Int ?? 0) > 40, "\(seen)")
        #expect(seen["readings_written"] as? Int ?? 0 <= writtenBefore + 20, "written while frozen? \(seen)")

        // The disk answers: what waited is written, and the status line goes.
        var recovered: [String: Any] = [:]
        let clear = await eventually(timeout: .seconds(15), every: .milliseconds(250)) {
            guard let s = await status(), s["readings_error"] is NSNull, s["readings_pending"] as? Int == 0 else { return false }
            recovered = s
            return true
        }
        #expect(clear, "status still says the readings are not stored: \(recovered)\n\(log().suffix(2000))")
        #expect(recovered["readings_dropped"] as? Int == 0)
        #expect(await harness.simulator.connectCount == connects, "the link was made again")
        #expect(log().contains("event=readings-disk-stalled"), "the log says it")
        #expect(log().contains("event=readings-disk-answered"), "the log says it ended")

        // Everything on the disk so far, in order: nothing lost, nothing doubled.
        let seqs = try ReadingLog.readRecords(directory: inside).map(\.seq)
        let sent = harness.sequencesSent()
        let exit = daemon.terminate()
        stopped = true
        await harness.stop()
        #expect(ChildProcess.exitCode(exit) == 0, "exit status after SIGTERM; log:\n\(log().suffix(2000))")
        print("figure: hung disk 8 s: \(writtenBefore) written before, \(seen["readings_pending"] ?? "?") waiting at the last check while frozen, \(seqs.count) on disk after, \(sent.count) sent by then, the dongle connected throughout")
        #expect(!seqs.isEmpty && seqs == Array(1...UInt64(seqs.count)), "seqs on disk are not 1…\(seqs.count) without gaps or repeats")
        #expect(seqs.count > writtenBefore + 100)
    }
}
