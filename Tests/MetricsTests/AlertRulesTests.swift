import Foundation
import TestSupport
import Testing

/// config/tether-alerts.yml, the alert rules docs/operations.md's "Metrics" section
/// gives: valid for Prometheus, and each firing when it should and only then
/// (promtool's rule unit tests, Resources/tether-alerts-test.yml).
@Suite struct AlertRulesTests {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let rules = here.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("config/tether-alerts.yml").path
    @Test(.enabled(if: Promtool.installed, "promtool (Debian package prometheus; make deps installs it)"))
    func theRulesAreValid() throws {
        let result = try Promtool.run(["check", "rules", Self.rules])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("SUCCESS: 5 rules found"), "\(result.output)")
    }

    @Test(.enabled(if: Promtool.installed, "promtool (Debian package prometheus; make deps installs it)"))
    func eachRuleFiresWhenItShouldAndOnlyThen() throws {
        let result = try Promtool.run(["test", "rules", Self.here.appendingPathComponent("Resources/tether-alerts-test.yml").path])
        #expect(result.status == 0, "\(result.output)")
    }
}
