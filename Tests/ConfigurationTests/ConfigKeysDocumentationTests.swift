import Configuration
import Foundation
import Testing

/// The keys the parser accepts (`ConfigKeys`, the list it rejects unknown
/// keys against) are the keys the documentation names: the man page,
/// tether.toml(5), exactly, and the reference in docs/ at least. A key added
/// to the parser without its documentation, or a documented key the parser
/// no longer takes, fails here with its name.
@Suite("Config keys: the parser's, the man page's and the docs'")
struct ConfigKeysDocumentationTests {
    /// The package root: this file is <root>/Tests/ConfigurationTests/….swift.
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func read(_ relative: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(relative), encoding: .utf8)
    }

    /// "table.key" for every key of `tables`, sorted.
    static func dotted(_ tables: [String: Set<String>]) -> [String] {
        tables.flatMap { table, keys in keys.map { "\(table).\($0)" } }.sorted()
    }

    /// The tables and keys a man page in the layout of packaging/man/tether.toml.5
    /// documents: a table is a `.SS [name]` subsection, a key a `.TP` paragraph
    /// whose tag line is `.B key`. Any `.SH` ends the tables.
    static func documentedKeys(inManPage text: String) -> [String: Set<String>] {
        var tables: [String: Set<String>] = [:]
        var table: String?
        var tagFollows = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            defer { tagFollows = line == ".TP" }
            if line.hasPrefix(".SH") {
                table = nil
            } else if line.hasPrefix(".SS [") && line.hasSuffix("]") {
                let name = String(line.dropFirst(".SS [".count).dropLast())
                table = name
                if tables[name] == nil { tables[name] = [] }
            } else if tagFollows, let table, line.hasPrefix(".B ") {
                let key = line.dropFirst(".B ".count).replacingOccurrences(of: "\\-", with: "-")
                tables[table, default: []].insert(key)
            }
        }
        return tables
    }

    @Test func theManPageDocumentsExactlyTheKeysTheParserAccepts() throws {
        let page = try Self.read("packaging/man/tether.toml.5")
        let documented = Set(Self.dotted(Self.documentedKeys(inManPage: page)))
        let accepted = Set(Self.dotted(ConfigKeys.tables))
        #expect(accepted.count > 40, "the parser's list was read: \(accepted.count) keys")
        let undocumented = accepted.subtracting(documented).sorted()
        let stale = documented.subtracting(accepted).sorted()
        #expect(undocumented.isEmpty, "keys the parser accepts that packaging/man/tether.toml.5 does not document: \(undocumented)")
        #expect(stale.isEmpty, "keys packaging/man/tether.toml.5 documents that the parser rejects: \(stale)")
        #expect(Set(Self.documentedKeys(inManPage: page).keys) == Set(ConfigKeys.tables.keys), "one .SS [table] per table")
    }

    /// The checker itself: a page missing a key, or naming one too many, is told apart.
    @Test func theManPageReaderFindsTablesAndKeysOnly() {
        let page = """
            .SH DESCRIPTION
            .TP
            .B not_a_key
            .SS [dongle]
            .TP
            .B address
            Text with
            .B bold
            words.
            .TP
            .B name\\-prefix
            .SH FILES
            .TP
            .B /etc/tether/tether.toml
            """
        #expect(Self.documentedKeys(inManPage: page) == ["dongle": ["address", "name-prefix"]])
    }

    /// The reference in docs/ names every key as `table.key` (the daemon's in
    /// docs/configuration.md, the forwarder's with its section in docs/operations.md).
    @Test func theDocsNameEveryKey() throws {
        let docs = try Self.read("docs/configuration.md") + Self.read("docs/operations.md")
        let missing = Self.dotted(ConfigKeys.tables).filter { !docs.contains("`\($0)`") }
        #expect(missing.isEmpty, "keys neither docs/configuration.md nor docs/operations.md names: \(missing)")
    }

    /// Every listed key is really read: given a value of a type no key takes
    /// (a TOML date-time), the parser reports that key, not an unknown one. A
    /// key listed but never read would be accepted and silently ignored.
    @Test(arguments: ConfigKeysDocumentationTests.dotted(ConfigKeys.tables))
    func everyAcceptedKeyIsRead(_ dotted: String) throws {
        let parts = dotted.split(separator: ".").map(String.init)
        let (table, key) = (parts[0], parts[1])
        var text = "[dongle]\n"
        if !(table == "dongle" && key == "address") { text += "address = \"AA:BB:CC:DD:EE:FF\"\n" }
        if table == "dongle" {
            text += "\(key) = 1979-05-27T07:32:00Z\n"
        } else {
            text += "[\(table)]\n"
            if table == "mqtt" && key != "url" { text += "url = \"mqtt://127.0.0.1\"\n" }
            text += "\(key) = 1979-05-27T07:32:00Z\n"
        }
        let error = try #require(throws: ConfigError.self) { try TetherConfig.parse(text, file: "f") }
        #expect(error.key == dotted, "\(error)")
        #expect(!error.message.contains("unknown"), "\(error)")
    }

    @Test func aKeyNotListedIsRejectedWithTheListedOnes() throws {
        let error = try #require(throws: ConfigError.self) {
            try TetherConfig.parse("[keepalive]\nintervall = \"5s\"\n[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n", file: "f")
        }
        #expect(error.key == "keepalive.intervall")
        #expect(error.message.contains("unknown key in [keepalive]"), "\(error)")
        for key in ConfigKeys.keepalive { #expect(error.message.contains(key), "\(error) lists \(key)") }
    }
}
