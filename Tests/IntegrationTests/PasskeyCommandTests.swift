import ChildProcess
import Foundation
import TestSupport
import Testing

/// Only `tether run` reads the passkey file: `check-config` judges its owner
/// and mode without reading it, and `readings` and `forward` never touch it,
/// so a passkey file they could not parse (or one the rules refuse) lets
/// them run.
@Suite(.serialized) struct PasskeyCommandTests {
    struct Setup {
        let directory: TemporaryDirectory
        var config: String { directory.path + "/tether.toml" }
        var passkey: String { directory.path + "/passkey" }
        var readings: String { directory.path + "/readings" }

        init(passkey content: String, mode: Int) throws {
            directory = try TemporaryDirectory("tether-passkey-commands")
            try FileManager.default.createDirectory(atPath: directory.path + "/readings", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
            try Data(content.utf8).write(to: URL(fileURLWithPath: directory.path + "/passkey"))
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: directory.path + "/passkey")
            try """
            [dongle]
            address = "AA:BB:CC:DD:EE:FF"
            pairing = "passkey-file"
            passkey_file = "\(directory.path)/passkey"
            [readings]
            directory = "\(directory.path)/readings"
            [mqtt]
            url = "mqtt://127.0.0.1:9"
            """.write(toFile: directory.path + "/tether.toml", atomically: false, encoding: .utf8)
        }

        /// Runs `tether ARGUMENTS` to its end: exit status, stdout, stderr.
        func run(_ arguments: [String]) throws -> (status: Int32?, stdout: String, stderr: String) {
            let out = directory.path + "/out", err = directory.path + "/err"
            let process = try ChildProcess(
                executable: DaemonProcessTests.tetherPath, arguments: arguments,
                environment: ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent"]) { $1 },
                stdoutPath: out, stderrPath: err)
            let status = ChildProcess.exitCode(process.wait(timeout: .seconds(20)))
            return (status, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "", (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
        }

        /// `tether forward` starts (it keeps retrying the absent broker) and
        /// stops cleanly on SIGTERM: its config, passkey_file and all, was good.
        func forwardRuns() throws -> (Int32?, String) {
            let err = directory.path + "/forward.err"
            let process = try ChildProcess(
                executable: DaemonProcessTests.tetherPath,
                arguments: ["forward", "--config", config, "--state-directory", directory.path + "/state"],
                stderrPath: err)
            Thread.sleep(forTimeInterval: 1.5)
            let early = process.poll()
            let status = early ?? process.terminate()
            return (early == nil ? ChildProcess.exitCode(status) : -1, (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
        }
    }

    /// Contents `tether run` would refuse, in a file the rules accept.
    @Test func aPasskeyFileThatWouldNotParseLetsTheOtherCommandsRun() throws {
        let setup = try Setup(passkey: "not a passkey\n", mode: 0o600)
        defer { setup.directory.remove() }
        let check = try setup.run(["check-config", setup.config])
        #expect(check.status == 0, "\(check)")
        #expect(check.stdout.contains("pairs with the passkey in \(setup.passkey)"), "\(check)")
        #expect(check.stdout.contains("mode 0600: usable by the service's user"), "\(check)")
        let readings = try setup.run(["readings", "--config", setup.config, "--since", "1h"])
        #expect(readings.status == 0, "\(readings)")
        let (forward, log) = try setup.forwardRuns()
        #expect(forward == 0, "forward ran until SIGTERM: \(log)")
        #expect(!log.contains("passkey"), "\(log)")
        // tether run reads it, and stops with the config's status.
        let run = try setup.run(["run", "--config", setup.config])
        #expect(run.status == 78, "\(run)")
        #expect(run.stderr.contains("six-digit passkey"), "\(run)")
    }

    /// A passkey file the group may read (the old advice: 0640, group
    /// tether): check-config says what is wrong and how to fix it, exit 78,
    /// while readings and forward run as before.
    @Test func aPasskeyFileTheGroupMayReadIsReportedByCheckConfigOnly() throws {
        let setup = try Setup(passkey: "123456\n", mode: 0o640)
        defer { setup.directory.remove() }
        let check = try setup.run(["check-config", setup.config])
        #expect(check.status == 78, "\(check)")
        #expect(check.stderr.contains("tether.toml:4: dongle.passkey_file: \(setup.passkey): its group or others may read it (mode 0640)"), "\(check)")
        #expect(check.stderr.contains("chmod 0600") && check.stderr.contains("LoadCredential=passkey:"), "\(check)")
        let readings = try setup.run(["readings", "--config", setup.config, "--since", "1h"])
        #expect(readings.status == 0, "\(readings)")
        let (forward, log) = try setup.forwardRuns()
        #expect(forward == 0, "forward ran until SIGTERM: \(log)")
        let run = try setup.run(["run", "--config", setup.config])
        #expect(run.status == 78, "\(run)")
        #expect(run.stderr.contains("its group or others may read it"), "\(run)")
    }
}
