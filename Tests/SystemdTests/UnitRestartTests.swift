import Foundation
import Systemd
import Testing
import TestSupport

/// `uart-reattach`'s restart of the unit that attaches the controller,
/// against stand-ins for systemctl: it succeeds, it is refused (what polkit
/// answers a unit the config does not name), it hangs.
@Suite struct UnitRestartTests {
    /// Written by a shell of its own, never through a descriptor of this
    /// process: a process another test spawns inherits this process's
    /// descriptors until its exec, even close-on-exec ones, and while any
    /// of them holds the script open for writing, exec fails with ETXTBSY
    /// (seen: "cannot start …/systemctl: Text file busy"). The shell has
    /// exited, and its descriptor with it, before the script runs.
    func systemctl(_ dir: TemporaryDirectory, _ body: String) throws -> String {
        let path = dir.url.appendingPathComponent("systemctl").path
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", "printf '%s\\n' \"$1\" > \"$2\" && chmod 755 \"$2\"", "sh", "#!/bin/sh\n\(body)", path]
        try writer.run()
        writer.waitUntilExit()
        try #require(writer.terminationStatus == 0)
        return path
    }

    /// The failure a restart ended in; nil (and the test failed) when it succeeded.
    func failure(of result: Result<Void, UnitRestart.Failure>, _ what: String) -> UnitRestart.Failure? {
        guard case .failure(let failure) = result else {
            Issue.record("\(what) taken for success")
            return nil
        }
        return failure
    }

    @Test func aRestartThatSystemdCarriesOutSucceeds() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = dir.url.appendingPathComponent("args").path
        let fake = try systemctl(dir, "echo \"$@\" > \(log)")
        guard case .success = UnitRestart.restart("hciuart.service", timeout: .seconds(10), systemctl: fake) else {
            Issue.record("a restart systemctl carried out taken for a failure")
            return
        }
        #expect(try String(contentsOfFile: log, encoding: .utf8) == "restart --no-ask-password -- hciuart.service\n")
    }

    @Test func aRefusedRestartSaysWhatSystemctlSaid() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fake = try systemctl(dir, "echo 'Failed to restart other.service: Access denied' >&2; exit 4")
        guard let failure = failure(of: UnitRestart.restart("other.service", timeout: .seconds(10), systemctl: fake), "a refusal") else { return }
        #expect(failure.description == "systemctl restart other.service failed (exit 4): Failed to restart other.service: Access denied")
        #expect(failure.refused)
    }

    /// What systemd 252 said in make e2e's uart-polkit when polkit refused
    /// user tether: a refusal, which the daemon explains; a unit that fails
    /// to start is not one.
    @Test func polkitsRefusalIsToldFromAUnitThatFails() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let refusing = try systemctl(dir, "echo 'Failed to restart e2e-uart-other.service: Interactive authentication required.' >&2; exit 1")
        guard let refusal = failure(of: UnitRestart.restart("e2e-uart-other.service", timeout: .seconds(10), systemctl: refusing), "a refusal") else { return }
        #expect(refusal.refused)
        let other = try TemporaryDirectory()
        defer { other.remove() }
        let failing = try systemctl(other, "echo 'Job for hciuart.service failed because the control process exited with error code.' >&2; exit 1")
        guard let failure = failure(of: UnitRestart.restart("hciuart.service", timeout: .seconds(10), systemctl: failing), "a failed start") else { return }
        #expect(!failure.refused)
    }

    @Test func aRestartThatHangsIsGivenUpAtItsDeadline() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fake = try systemctl(dir, "exec sleep 60")
        let started = ContinuousClock.now
        let result = UnitRestart.restart("hciuart.service", timeout: .milliseconds(300), systemctl: fake)
        let took = started.duration(to: .now)
        guard let failure = failure(of: result, "a hung restart") else { return }
        #expect(failure.description == "systemctl restart hciuart.service did not finish within 0.3 seconds")
        #expect(took < .seconds(5), "waited \(took)")
    }

    @Test func aMissingSystemctlIsAFailureNotACrash() {
        guard let failure = failure(of: UnitRestart.restart("hciuart.service", timeout: .seconds(1), systemctl: "/nonexistent/systemctl"), "no systemctl") else { return }
        #expect(failure.description.contains("/nonexistent/systemctl"))
    }
}
