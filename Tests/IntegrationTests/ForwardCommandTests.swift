import ChildProcess
import DBus
import Forwarding
import Foundation
import Readings
import TestSupport
import Testing

/// `tether forward` as a process, as systemd runs it: its exit codes for
/// what only the operator can fix, its logged retries for what the broker
/// answers, and what `tether status` shows of it.
@Suite(.serialized) struct ForwardCommandTests {
    /// A temporary directory with a readings log, a config and a state directory.
    struct Setup {
        let directory: TemporaryDirectory
        var readings: String { directory.path + "/readings" }
        var state: String { directory.path + "/state" }
        var config: String { directory.path + "/tether.toml" }

        init(records: Int) throws {
            directory = try TemporaryDirectory("forward-command")
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            let log = try ReadingLog(directory: readings, rotateSize: 1 << 20, retainSize: 1 << 30)
            if records > 0 { try log.append((1...records).map { ForwarderBacklogTests.reading(UInt32($0)) }) }
            log.close()
        }

        func append(_ range: ClosedRange<Int>) throws {
            let log = try ReadingLog(directory: readings, rotateSize: 1 << 20, retainSize: 1 << 30)
            try log.append(range.map { ForwarderBacklogTests.reading(UInt32($0)) })
            log.close()
        }

        func writeConfig(mqtt: [String]) throws {
            try """
            [dongle]
            address = "AA:BB:CC:DD:EE:FF"
            [readings]
            directory = "\(readings)"
            [mqtt]
            \(mqtt.joined(separator: "\n"))
            """.write(toFile: config, atomically: false, encoding: .utf8)
        }

        func forward(log: String = "forward.log") throws -> ChildProcess {
            try ChildProcess(
                executable: DaemonProcessTests.tetherPath,
                arguments: ["forward", "--config", config, "--state-directory", state],
                stderrPath: directory.path + "/" + log
            )
        }

        func log(_ name: String = "forward.log") -> String {
            (try? String(contentsOfFile: directory.path + "/" + name, encoding: .utf8)) ?? ""
        }

        func cursor() throws -> UInt64 { try ForwardCursor(path: state + "/cursor").load() }
    }

    /// A missing password file or TLS file cannot heal by retrying: exit 78
    /// (systemd's RestartPreventExitStatus) naming the setting and the file.
    @Test(arguments: [
        ("password_file", [#"username = "gw17""#, #"password_file = "/nonexistent/mqtt.password""#], "mqtt://127.0.0.1:1"),
        ("ca_file", [#"ca_file = "/nonexistent/ca.crt""#], "mqtts://127.0.0.1:1"),
        ("cert_file", [#"cert_file = "/nonexistent/client.crt""#, #"key_file = "/nonexistent/client.key""#], "mqtts://127.0.0.1:1"),
    ])
    func aFileOnlyTheOperatorCanFixExits78(setting: String, lines: [String], url: String) async throws {
        let setup = try Setup(records: 10)
        defer { setup.directory.remove() }
        try setup.writeConfig(mqtt: [#"url = "\#(url)""#] + lines)
        let process = try setup.forward()
        let status = process.wait(timeout: .seconds(10))
        let log = setup.log()
        #expect(ChildProcess.exitCode(status) == 78, "\(log)")
        #expect(log.contains("mqtt.\(setting)") && log.contains("/nonexistent/"), "names the setting and the file: \(log)")
        #expect(try setup.cursor() == 0)
        #expect(try ReadingLog.readRecords(directory: setup.readings).count == 10, "the readings are untouched")
    }

    /// A password file every local user may read is refused when the
    /// forwarder reads it at start: exit 78, naming the file, its mode and
    /// the fix; nothing is published.
    @Test func aWorldReadablePasswordFileExits78SayingHowToFixIt() async throws {
        let setup = try Setup(records: 10)
        defer { setup.directory.remove() }
        let file = setup.directory.path + "/mqtt.password"
        try "s3cret\n".write(toFile: file, atomically: false, encoding: .utf8)
        #expect(chmod(file, 0o644) == 0)
        try setup.writeConfig(mqtt: [#"url = "mqtt://127.0.0.1:1""#, #"username = "gw17""#, #"password_file = "\#(file)""#])
        let process = try setup.forward()
        let status = process.wait(timeout: .seconds(10))
        let log = setup.log()
        #expect(ChildProcess.exitCode(status) == 78, "\(log)")
        #expect(log.contains("\(file): mqtt.password_file has mode 0644") && log.contains("chmod 0600"), "\(log)")
        #expect(!log.contains("s3cret"), "the password is never logged")
        #expect(try setup.cursor() == 0)
    }

    /// Started by hand with a state directory that does not exist: created
    /// (0700) when its parent is writable, and forwarding runs; otherwise an
    /// exit at once with 73 (EX_CANTCREAT) naming the path and the option,
    /// instead of publishing a window of records and then failing every
    /// cursor store.
    @Test func aStateDirectoryThatCannotBeMadeExits73AndOneThatCanIsMade() async throws {
        let setup = try Setup(records: 10)
        defer { setup.directory.remove() }
        try setup.writeConfig(mqtt: [#"url = "mqtt://127.0.0.1:1""#])
        let impossible = try ChildProcess(
            executable: DaemonProcessTests.tetherPath,
            arguments: ["forward", "--config", setup.config, "--state-directory", "/nonexistent/x"],
            stderrPath: setup.directory.path + "/impossible.log")
        let status = impossible.wait(timeout: .seconds(10))
        let log = setup.log("impossible.log")
        #expect(ChildProcess.exitCode(status) == 73, "\(log)")
        #expect(log.contains("/nonexistent/x") && log.contains("--state-directory"), "names the path and the option: \(log)")

        let fresh = setup.directory.path + "/fresh-state"
        let made = try ChildProcess(
            executable: DaemonProcessTests.tetherPath,
            arguments: ["forward", "--config", setup.config, "--state-directory", fresh],
            stderrPath: setup.directory.path + "/fresh.log")
        let created = await eventually(timeout: .seconds(10)) { FileManager.default.fileExists(atPath: fresh + "/status.json") }
        _ = made.terminate()
        var info = stat()
        #expect(created, "it runs, and stores its status there: \(setup.log("fresh.log"))")
        #expect(stat(fresh, &info) == 0 && info.st_mode & 0o777 == 0o700)
    }

    /// Under systemd's watchdog (`WatchdogSec=`, here 1 s), the forwarder pets
    /// at half of it, as the daemon does: it once petted once per timeout,
    /// so every pet raced systemd's kill, and `make e2e`'s systemd pass saw
    /// tether-forward.service killed a minute after it started.
    @Test func petsSystemdsWatchdogAtHalfItsTimeout() async throws {
        let setup = try Setup(records: 10)
        defer { setup.directory.remove() }
        try setup.writeConfig(mqtt: [#"url = "mqtt://127.0.0.1:1""#])
        let notify = try DatagramReceiver(address: setup.directory.path + "/notify")
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = notify.address
        environment["WATCHDOG_USEC"] = "1000000"
        environment.removeValue(forKey: "WATCHDOG_PID")
        let process = try ChildProcess(
            executable: DaemonProcessTests.tetherPath,
            arguments: ["forward", "--config", setup.config, "--state-directory", setup.state],
            environment: environment, stderrPath: setup.directory.path + "/forward.log")
        let log = NotifyLog(notify)
        _ = await log.collect(timeout: .seconds(10)) { $0.filter { $0["WATCHDOG"] == "1" }.count >= 5 }
        _ = process.terminate()
        #expect(log.messages.first?.message["READY"] == "1", "READY=1 comes first: \(log.messages.map(\.message.keys)) \(setup.log())")
        #expect(log.watchdogPets.count >= 5, "WATCHDOG=1 sent: \(log.watchdogPets) \(setup.log())")
        // At half of WATCHDOG_USEC: the typical gap says so. One tick may
        // come late on a loaded machine (the test's suites share 2 cores),
        // which is what petting at half the timeout allows for.
        let gaps = log.watchdogGaps.sorted()
        let median = gaps.isEmpty ? Duration.zero : gaps[gaps.count / 2]
        #expect(median >= .milliseconds(400) && median < .milliseconds(700), "WATCHDOG=1 at half of WATCHDOG_USEC: gaps \(gaps)")
        #expect(gaps.allSatisfy { $0 < .milliseconds(1500) }, "no gap near the whole timeout: \(gaps)")
    }

    /// A broker that refuses the password, a certificate the CA does not
    /// verify, or one the clock reads as not valid yet (a gateway whose
    /// clock says 1970): the broker's side, or the clock, may be what
    /// changes, so the forwarder keeps retrying, and says as an error what
    /// to check (for the clock, not the CA file); SIGTERM still ends it
    /// with 0, nothing was acknowledged and nothing is lost.
    @Test(arguments: ["password", "ca", "clock"])
    func aRefusalByTheBrokerIsLoggedNamingTheCauseAndRetried(wrong: String) async throws {
        let setup = try Setup(records: 100)
        defer { setup.directory.remove() }
        let broker: MosquittoBroker
        if wrong == "password" {
            broker = try MosquittoBroker(directory: setup.directory.url.appendingPathComponent("broker"), passwords: ["gw17": "right"])
            try "wrong\n".write(toFile: setup.directory.path + "/password", atomically: false, encoding: .utf8)
            #expect(chmod(setup.directory.path + "/password", 0o600) == 0, "a password file others may read is refused")
            try setup.writeConfig(mqtt: [
                #"url = "mqtt://127.0.0.1:\#(broker.port)""#, #"username = "gw17""#,
                #"password_file = "\#(setup.directory.path)/password""#,
            ])
        } else {
            try TestCertificates.make(in: setup.directory.path)
            try TestCertificates.makeNotYetValid(in: setup.directory.path)
            try FileManager.default.copyItem(atPath: setup.directory.path + "/\(wrong == "clock" ? "future" : "server").crt",
                                             toPath: setup.directory.path + "/served.crt")
            broker = try MosquittoBroker(
                directory: setup.directory.url.appendingPathComponent("broker"),
                extraConfig: ["cafile \(setup.directory.path)/ca.crt",
                              "certfile \(setup.directory.path)/served.crt",
                              "keyfile \(setup.directory.path)/server.key"]
            )
            try setup.writeConfig(mqtt: [
                #"url = "mqtts://127.0.0.1:\#(broker.port)""#,
                #"ca_file = "\#(setup.directory.path)/\#(wrong == "clock" ? "ca" : "other").crt""#,
            ])
        }
        defer { broker.stop() }
        let process = try setup.forward()
        let expected = switch wrong {
        case "password": ["not authorised", "check mqtt.username and mqtt.password_file", "event=broker-refused"]
        case "ca": ["certificate verify failed", "check mqtt.ca_file", "event=broker-tls-failed"]
        default: ["cannot be verified until the clock is set", "the system clock reads ", "certificate is not yet valid",
                  "connects as soon as the clock is set", "event=broker-tls-clock"]
        }
        let logged = await eventually(timeout: .seconds(10)) { expected.allSatisfy { setup.log().contains($0) } }
        #expect(logged, "\(setup.log())")
        if wrong == "clock" {
            #expect(!setup.log().contains("check mqtt.ca_file"), "the CA file is not what is wrong: \(setup.log())")
            print("figure: a certificate valid from tomorrow: \(setup.log().split(separator: "\n").first { $0.contains("broker-tls-clock") } ?? "")")
            // The clock is set (to what it reads: microseconds; it needs
            // CAP_SYS_TIME) once the certificate is valid: the forwarder
            // hears it through its timerfd and connects at once.
            broker.stop()
            try FileManager.default.removeItem(atPath: setup.directory.path + "/served.crt")
            try FileManager.default.copyItem(atPath: setup.directory.path + "/server.crt", toPath: setup.directory.path + "/served.crt")
            try broker.start()
            var wall = timespec()
            clock_gettime(CLOCK_REALTIME, &wall)
            if clock_settime(CLOCK_REALTIME, &wall) == 0 {
                let connected = await eventually(timeout: .seconds(5)) {
                    setup.log().contains("event=broker-retry-clock-set") && setup.log().contains("event=broker-connected")
                }
                #expect(connected, "\(setup.log())")
                print("figure: \(setup.log().split(separator: "\n").first { $0.contains("broker-retry-clock-set") } ?? "no retry on the clock's step")")
                #expect(await eventually { (try? setup.cursor()) == 100 }, "then everything is delivered")
                _ = process.terminate()
                return
            }
            print("not checked: the forwarder hearing the clock set (setting the clock needs CAP_SYS_TIME)")
            broker.stop()
            try broker.start()
        }
        #expect(process.isRunning, "a refusal is retried, not an exit: \(setup.log())")
        #expect(!setup.log().contains("wrong"), "the password is never logged")

        let bus = try BusDaemonProcess(directory: setup.directory.url.appendingPathComponent("bus"))
        defer { bus.stop() }
        let tether = TetherCommand(directory: setup.directory.url, busAddress: bus.address)
        let report = try #require(try await Self.forwarderJSON(tether, state: setup.state))
        #expect(report["running"] as? Bool == true)
        #expect(report["connected"] as? Bool == false)
        #expect((report["last_error"] as? String)?.contains(expected[0]) == true, "\(report)")
        #expect(report["backlog"] as? Int == 100)

        let status = process.terminate()
        #expect(ChildProcess.exitCode(status) == 0, "\(setup.log())")
        #expect(try setup.cursor() == 0)
        #expect(try ReadingLog.readRecords(directory: setup.readings).count == 100)
    }

    /// `tether status` shows the forwarder: connected and caught up; not
    /// connected with a backlog while the broker is away; not running
    /// after a SIGKILL (the file cannot say so, the pid check does).
    @Test func statusShowsTheForwardersConnectionCursorAndBacklog() async throws {
        let setup = try Setup(records: 1000)
        defer { setup.directory.remove() }
        let broker = try MosquittoBroker(directory: setup.directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try setup.writeConfig(mqtt: [#"url = "mqtt://127.0.0.1:\#(broker.port)""#, "batch = 10"])
        let bus = try BusDaemonProcess(directory: setup.directory.url.appendingPathComponent("bus"))
        defer { bus.stop() }
        let tether = TetherCommand(directory: setup.directory.url, busAddress: bus.address)

        // Before any forwarder ran here: null, and no row in the text.
        let none = try await tether.run(["status", "--json", "--forwarder-state-directory", setup.state])
        #expect(none.status == 3, "no daemon runs: \(none.all)")
        #expect(none.stdout.contains(#""forwarder":null"#), "\(none.all)")

        let process = try setup.forward()
        var report: [String: Any] = [:]
        let caughtUp = await eventually(timeout: .seconds(15), every: .milliseconds(200)) {
            report = ((try? await Self.forwarderJSON(tether, state: setup.state)) ?? nil) ?? [:]
            return report["acknowledged_seq"] as? Int == 1000
        }
        #expect(caughtUp, "\(report)\n\(setup.log())")
        #expect(report["running"] as? Bool == true && report["connected"] as? Bool == true, "\(report)")
        #expect(report["broker"] as? String == "127.0.0.1:\(broker.port)")
        #expect(report["backlog"] as? Int == 0 && report["gap_records"] as? Int == 0 && report["error"] is NSNull, "\(report)")
        // Like `tether run`, it runs on threads of its own, none of libdispatch's
        // (whose first worker brings a once-a-second wake-up for good).
        let threads = try DaemonProcessTests.threadNames(of: process.pid)
        let ours: Set = ["tether", "tether-main", "tether-forward", "tether-io", "tether-log"]
        #expect(threads.allSatisfy(ours.contains), "threads that are not Tether's own: \(threads)")
        let text = try await tether.run(["status", "--forwarder-state-directory", setup.state])
        #expect(text.status == 3)
        #expect(text.stdout.contains("tether (default): not running"), "\(text.all)")
        #expect(text.stdout.contains("forwarder     connected to 127.0.0.1:\(broker.port)")
                && text.stdout.contains("acknowledged seq 1000, backlog 0"), "\(text.all)")

        broker.stop()
        try setup.append(1001...1050)
        let away = await eventually(timeout: .seconds(10), every: .milliseconds(200)) {
            report = ((try? await Self.forwarderJSON(tether, state: setup.state)) ?? nil) ?? [:]
            return report["connected"] as? Bool == false
        }
        #expect(away, "\(report)")
        #expect(report["backlog"] as? Int == 50 && report["acknowledged_seq"] as? Int == 1000, "\(report)")
        #expect(report["last_error"] is String, "\(report)")
        #expect(setup.log().contains("event=broker-lost"), "\(setup.log())")

        process.signal(SIGKILL)
        _ = process.wait()
        report = try #require(try await Self.forwarderJSON(tether, state: setup.state))
        #expect(report["running"] as? Bool == false && report["connected"] as? Bool == false, "\(report)")
        #expect(report["backlog"] as? Int == 50)
    }

    /// `tether status --json`'s forwarder object.
    /// nil when there is none (yet).
    static func forwarderJSON(_ tether: TetherCommand, state: String) async throws -> [String: Any]? {
        let result = try await tether.run(["status", "--json", "--forwarder-state-directory", state])
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        return object?["forwarder"] as? [String: Any]
    }
}
