@testable import Configuration
import Testing

/// How a ConfigError prints: one line, the key recognisable. Regressions found
/// by `make fuzz` (config target, Fuzz/README.md), replayed through
/// `TetherConfig.parse` as the fuzzer ran them.
@Suite("Config error display (fuzz regressions)")
struct ConfigErrorDisplayTests {
    static let file = "/etc/tether/fuzz.toml"

    /// Found: `""=""`, an empty quoted key, printed as "fuzz.toml:1: : unknown key".
    @Test func anEmptyKeyIsShownQuoted() throws {
        let error = try #require(configRefusal("\"\"=\"\"", file: Self.file))
        #expect(error.key == "")
        #expect(error.description.hasPrefix(Self.file + ":1: \"\": unknown key"))
    }

    @Test func aKeyWithANewlineStaysOnOneLine() throws {
        let error = try #require(configRefusal("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n\"a\\nb c\" = 1\n", file: Self.file))
        #expect(error.key == "dongle.a\nb c")
        #expect(error.description.contains(#""dongle.a\nb c": unknown key"#))
        #expect(!error.description.contains("\n"))
    }

    /// Found: `=+2\u{0F}`: the prescreen's message quoted the bare value with its
    /// control character as it was.
    @Test func controlCharactersInMessagesAreEscaped() throws {
        let error = try #require(configRefusal("=+2\u{0F}\n", file: Self.file))
        #expect(error.message.hasPrefix("TOML syntax error"))
        #expect(error.description.contains(#"+2\u{f}"#))
        #expect(!error.description.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7f })
    }

    @Test(arguments: ["keepalive.interval", "dongle", "a-b_c.9"])
    func plainKeysAreShownAsTheyAre(key: String) {
        let error = ConfigError(file: Self.file, line: 3, key: key, message: "m")
        #expect(error.description == "\(Self.file):3: \(key): m")
    }
}
