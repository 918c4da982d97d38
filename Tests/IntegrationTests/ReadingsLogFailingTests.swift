import ChildProcess
import Foundation
import Readings
import Simulator
import TestSupport
import Testing

/// What the test needs of the machine: a private mount namespace (user
/// namespaces, or root) in which to give the daemon a small tmpfs as its
/// readings directory. Outside the suite because a suite's traits cannot
/// refer to the suite itself.
enum SmallDiskRequirements {
    static let unshare = "/usr/bin/unshare"

    static let met: Bool = {
        guard FileManager.default.isExecutableFile(atPath: unshare),
              let probe = try? ChildProcess(executable: unshare, arguments: ["-rm", "/bin/true"])
        else { return false }
        return ChildProcess.exitCode(probe.wait(timeout: .seconds(10))) == 0
    }()

    static let unmet: Comment = "needs `unshare -rm` (util-linux, and user namespaces or root) to mount a small tmpfs for the daemon"
}

/// A disk that refuses the readings (a full file system here; a read-only
/// remount after an error refuses them the same way), as an operator sees
/// it: `tether status` says the readings are not stored and how many wait in
/// memory, and once the disk takes writes again everything waiting is
/// written in order, nothing lost or doubled.
///
/// The daemon runs in a mount namespace of its own (`unshare -rm`) with a
/// 128 KiB tmpfs over its readings directory, mostly taken by a filler file;
/// the test reaches that tmpfs through `/proc/PID/root`.
@Suite(.serialized, .enabled(if: SmallDiskRequirements.met, SmallDiskRequirements.unmet))
struct ReadingsLogFailingTests {
    @Test func aFullDiskIsShownByStatusAndNothingIsLostOnceItHasRoomAgain() async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        let config = try DaemonProcessTests.writeConfig(harness)
        let directory = harness.readingsDirectory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script = """
            set -e
            mount -t tmpfs -o size=128k,mode=0750 tmpfs "$1"
            head -c 98304 /dev/zero > "$1/filler"
            shift
            exec "$@"
            """
        let daemon = try ChildProcess(
            executable: SmallDiskRequirements.unshare,
            arguments: ["-rm", "/bin/sh", "-c", script, "sh", directory, DaemonProcessTests.tetherPath, "run", "--config", config],
            environment: ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": harness.busDaemon.address]) { $1 },
            stderrPath: harness.directory.url.appendingPathComponent("daemon.log").path
        )
        let log = { (try? String(contentsOfFile: harness.directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? "" }
        // The daemon's view of its readings directory (unshare execs: same pid).
        let inside = "/proc/\(daemon.pid)/root\(directory)"
        let tether = TetherCommand(directory: harness.directory.url, busAddress: harness.busDaemon.address)
        func status() async -> [String: Any]? {
            guard let result = try? await tether.run(["status", "--json"]), result.status == 0 else { return nil }
            return try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        }

        // About 30 KiB free: full within seconds at 50 readings a second.
        var refused: [String: Any] = [:]
        let full = await eventually(timeout: .seconds(30), every: .milliseconds(250)) {
            guard let s = await status(), s["readings_error"] is String, (s["readings_pending"] as? Int ?? 0) > 20 else { return false }
            refused = s
            return true
        }
        #expect(full, "status never said the readings are not stored: \(refused)\n\(log().suffix(2000))")
        #expect((refused["readings_error"] as? String)?.contains("No space left on device") == true, "\(refused)")
        #expect(refused["state"] as? String == "online", "the link is fine: only the disk refuses")
        let text = try await tether.run(["status"])
        #expect(text.stdout.contains("readings      NOT STORED: cannot write readings to \(directory)"), "\(text.all)")
        #expect(text.stdout.contains("waiting in memory"), "\(text.all)")
        #expect(log().contains("event=reading-gap"), "the log says it")
        let writtenWhileFull = refused["readings_written"] as? Int ?? 0

        // Room again: what waited is written, and the status line goes.
        try FileManager.default.removeItem(atPath: inside + "/filler")
        var recovered: [String: Any] = [:]
        let clear = await eventually(timeout: .seconds(15), every: .milliseconds(250)) {
            guard let s = await status(), s["readings_error"] is NSNull,
                  (s["readings_written"] as? Int ?? 0) > writtenWhileFull + 50 else { return false }
            recovered = s
            return true
        }
        #expect(clear, "status still says the readings are not stored: \(recovered)\n\(log().suffix(2000))")
        #expect(recovered["readings_dropped"] as? Int == 0)
        let after = try await tether.run(["status"])
        #expect(!after.stdout.contains("NOT STORED"), "\(after.all)")

        // Everything on the tmpfs so far, in order: nothing lost, nothing doubled.
        let seqs = try ReadingLog.readRecords(directory: inside).map(\.seq)
        print("figure: full disk: \(writtenWhileFull) written before it filled, \(refused["readings_pending"] ?? "?") waiting at the check, \(seqs.count) on disk after room came back")
        #expect(!seqs.isEmpty && seqs == Array(1...UInt64(seqs.count)), "seqs on disk are not 1…\(seqs.count) without gaps or repeats")
        #expect(seqs.count > writtenWhileFull)

        let exit = daemon.terminate()
        await harness.stop()
        #expect(ChildProcess.exitCode(exit) == 0, "exit status after SIGTERM; log:\n\(log().suffix(2000))")
    }
}
