@testable import Configuration
import Foundation
import Testing
import TestSupport

/// `dongle.pairing` and `dongle.passkey_file`: the passkey file is read when
/// the config loads, and every problem with it is an error at its line.
@Suite struct PairingConfigTests {
    static let file = "/etc/tether/tether.toml"

    /// A config whose `[dongle]` table ends with `extra` (lines 4 on).
    static func config(_ extra: String) -> String {
        "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\nnotify_path = \"start-notify\"\n" + extra
    }

    /// A passkey file holding `content` with `mode`, in a fresh directory.
    static func passkeyFile(_ content: String, mode: Int = 0o600) throws -> (TemporaryDirectory, String) {
        let directory = try TemporaryDirectory("tether-passkey")
        let path = directory.path + "/passkey"
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return (directory, path)
    }

    @Test func theDefaultIsNever() throws {
        let config = try TetherConfig.parse(Self.config(""), file: Self.file)
        #expect(config.dongle.pairing == .never)
        #expect(!config.dongle.pairing.pairs)
    }

    @Test func justWorksNeedsNoFile() throws {
        let config = try TetherConfig.parse(Self.config("pairing = \"just-works\"\n"), file: Self.file)
        #expect(config.dongle.pairing == .justWorks)
    }

    @Test func aPasskeyFileIsReadWithItsLeadingZeros() throws {
        let (directory, path) = try Self.passkeyFile("012345\n")
        defer { directory.remove() }
        let config = try TetherConfig.parse(
            Self.config("pairing = \"passkey-file\"\npasskey_file = \"\(path)\"\n"), file: Self.file)
        #expect(config.dongle.pairing == .passkey(12345, file: path))
    }

    @Test func aMissingPasskeyFileIsAnErrorAtItsLine() throws {
        let error = try #require(configRefusal(Self.config("pairing = \"passkey-file\"\npasskey_file = \"/nonexistent/tether-passkey\"\n")))
        #expect(error.file == Self.file)
        #expect(error.line == 5)
        #expect(error.message.contains("/nonexistent/tether-passkey"))
        #expect(error.message.contains("No such file"))
    }

    @Test func aPasskeyFileOthersCanReadIsRefused() throws {
        let (directory, path) = try Self.passkeyFile("123456\n", mode: 0o644)
        defer { directory.remove() }
        let error = try #require(configRefusal(Self.config("pairing = \"passkey-file\"\npasskey_file = \"\(path)\"\n")))
        #expect(error.line == 5)
        #expect(error.message.contains("others may read it"))
    }

    @Test(arguments: ["12345\n", "1234567\n", "12a456\n", "123456\n\n", "", " 123456\n"])
    func aMalformedPasskeyIsRefused(_ content: String) throws {
        let (directory, path) = try Self.passkeyFile(content)
        defer { directory.remove() }
        let error = try #require(configRefusal(Self.config("pairing = \"passkey-file\"\npasskey_file = \"\(path)\"\n")))
        #expect(error.line == 5)
        #expect(error.message.contains("six-digit passkey"))
    }

    @Test func passkeyFileWithoutItsModeOrModeWithoutItsFileAreErrors() throws {
        let withoutFile = try #require(configRefusal(Self.config("pairing = \"passkey-file\"\n")))
        #expect(withoutFile.line == 4)
        #expect(withoutFile.message.contains("needs passkey_file"))
        let withoutMode = try #require(configRefusal(Self.config("passkey_file = \"/etc/tether/passkey\"\n")))
        #expect(withoutMode.line == 4)
        #expect(withoutMode.message.contains("only with pairing = \"passkey-file\""))
        let relative = try #require(configRefusal(Self.config("pairing = \"passkey-file\"\npasskey_file = \"passkey\"\n")))
        #expect(relative.message.contains("absolute path"))
    }

    @Test func anUnknownPairingIsAnErrorListingTheChoices() throws {
        let error = try #require(configRefusal(Self.config("pairing = \"yes\"\n")))
        #expect(error.line == 4)
        #expect(error.message.contains("\"never\", \"just-works\" or \"passkey-file\""))
    }

    @Test func passkeyParsing() {
        #expect(PasskeyFile.parse(Array("000000".utf8)) == .success(0))
        #expect(PasskeyFile.parse(Array("999999\r\n".utf8)) == .success(999_999))
        #expect((try? PasskeyFile.parse(Array("99999".utf8)).get()) == nil)
    }
}
