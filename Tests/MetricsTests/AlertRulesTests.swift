import ChildProcess
import Foundation
import TestSupport
import Testing

/// config/tether-alerts.yml, the alert rules README's "Metrics" section
/// gives: valid for Prometheus, and each firing when it should and only then
/// (promtool's rule unit tests, Resources/tether-alerts-test.yml).
@Suite struct AlertRulesTests {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let rules = here.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("config/tether-alerts.yml").path
    static let promtool = "/usr/bin/promtool"

    static func promtool(_ arguments: [String]) throws -> (status: Int32?, output: String) {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("promtool-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess(executable: promtool, arguments: arguments, stdoutPath: output, stderrPath: output)
        let status = ChildProcess.exitCode(process.wait(timeout: .seconds(60)))
        return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: promtool), "promtool (Debian package prometheus; make deps installs it)"))
    func theRulesAreValid() throws {
        let result = try Self.promtool(["check", "rules", Self.rules])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("SUCCESS: 4 rules found"), "\(result.output)")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: promtool), "promtool (Debian package prometheus; make deps installs it)"))
    func eachRuleFiresWhenItShouldAndOnlyThen() throws {
        let result = try Self.promtool(["test", "rules", Self.here.appendingPathComponent("Resources/tether-alerts-test.yml").path])
        #expect(result.status == 0, "\(result.output)")
    }
}
