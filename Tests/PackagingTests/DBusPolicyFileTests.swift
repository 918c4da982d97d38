import Foundation
import TestSupport
import Testing

/// systemd/io.tether.Tether.conf as text: who each <policy> block lets do
/// what. PolicyTests (IntegrationTests, as root) enforces the file on a real
/// dbus-daemon; this checks it anywhere.
@Suite struct DBusPolicyFileTests {
    /// Each <policy ATTRIBUTES>…</policy> block: its attributes and its body.
    static func policies() throws -> [(attributes: String, body: String)] {
        let text = try Packaging.read(Packaging.path("systemd/io.tether.Tether.conf"))
        // Comments out first: the header explains the rules in prose.
        let uncommented = try Regex(#"<!--.*?-->"#).dotMatchesNewlines()
        let code = text.replacing(uncommented, with: "")
        let block = try Regex(#"<policy\s+([^>]*)>(.*?)</policy>"#).dotMatchesNewlines()
        return code.matches(of: block).map { match in
            (String(match.output[1].substring ?? ""), String(match.output[2].substring ?? ""))
        }
    }

    @Test func reconnectIsForRootAndGroupTetherAdminOnly() throws {
        let policies = try Self.policies()
        #expect(policies.count == 4, "\(policies.map(\.attributes))")
        let granting = policies.filter { $0.body.contains(#"send_member="Reconnect""#) }.map(\.attributes)
        #expect(Set(granting) == [#"user="root""#, #"group="tether-admin""#], "Reconnect granted to \(granting)")
        #expect(!policies.contains { $0.attributes == #"group="tether""# }, "group tether (the readers) gets nothing on the bus")
        let everyone = try #require(policies.first { $0.attributes == #"context="default""# })
        #expect(!everyone.body.contains("Reconnect") && !everyone.body.contains("io.tether.Tether1\""),
                "everyone may read the status, nothing more")
        for member in ["Get", "GetAll"] {
            #expect(everyone.body.contains(#"send_member="\#(member)""#))
        }
        let owner = policies.filter { $0.body.contains("own") }.map(\.attributes)
        #expect(owner == [#"user="tether""#], "only user tether owns the names: \(owner)")
    }
}
