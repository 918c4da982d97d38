import Foundation
import Systemd
import Testing
import TestSupport

/// `uart-reattach`'s restart of the unit that attaches the controller,
/// against stand-ins for systemctl: it succeeds, it is refused (what polkit
/// answers a unit the config does not name), it hangs.
@Suite struct UnitRestartTests {
    /// Written through a close-on-exec descriptor: one that a process other
    /// tests spawn meanwhile inherited would make exec fail with ETXTBSY.
    func systemctl(_ dir: TemporaryDirectory, _ body: String) throws -> String {
        let path = dir.url.appendingPathComponent("systemctl").path
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o755)
        try #require(fd >= 0)
        let bytes = Array("#!/bin/sh\n\(body)\n".utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        try #require(written == bytes.count)
        return path
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
        guard case .failure(let failure) = UnitRestart.restart("other.service", timeout: .seconds(10), systemctl: fake) else {
            Issue.record("a refusal taken for success")
            return
        }
        #expect(failure.description == "systemctl restart other.service failed (exit 4): Failed to restart other.service: Access denied")
    }

    @Test func aRestartThatHangsIsGivenUpAtItsDeadline() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fake = try systemctl(dir, "exec sleep 60")
        let started = ContinuousClock.now
        let result = UnitRestart.restart("hciuart.service", timeout: .milliseconds(300), systemctl: fake)
        let took = started.duration(to: .now)
        guard case .failure(let failure) = result else {
            Issue.record("a hung restart taken for success")
            return
        }
        #expect(failure.description == "systemctl restart hciuart.service did not finish within 0.3 seconds")
        #expect(took < .seconds(5), "waited \(took)")
    }

    @Test func aMissingSystemctlIsAFailureNotACrash() {
        guard case .failure(let failure) = UnitRestart.restart("hciuart.service", timeout: .seconds(1), systemctl: "/nonexistent/systemctl") else {
            Issue.record("no systemctl taken for success")
            return
        }
        #expect(failure.description.contains("/nonexistent/systemctl"))
    }
}
