@testable import Configuration
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestSupport

/// `dongle.pairing` and `dongle.passkey_file`: only `tether run` reads the
/// passkey file (`loadPasskey`), which must be the service's alone (owner,
/// mode 0600) or systemd's credential; every problem with it is an error at
/// its line, and check-config judges it from its metadata alone.
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

    static func passkeyConfig(_ path: String) throws -> TetherConfig {
        try TetherConfig.parse(Self.config("pairing = \"passkey-file\"\npasskey_file = \"\(path)\"\n"), file: Self.file)
    }

    /// What `tether run` reads, or the error it stops with.
    static func load(_ config: TetherConfig, euid: UInt32 = geteuid(), environment: [String: String] = [:]) -> Result<Passkey?, ConfigError> {
        Result(catching: { () throws(ConfigError) -> Passkey? in try config.loadPasskey(euid: euid, environment: environment) })
    }

    static var me: PasskeyFile.ServiceUser { PasskeyFile.ServiceUser(uid: geteuid(), name: "test") }

    @Test func aPasskeyFileIsReadWithItsLeadingZerosByRunAlone() throws {
        let (directory, path) = try Self.passkeyFile("012345\n")
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        #expect(config.dongle.pairing == .passkey(.file(path)))
        #expect(try Self.load(config).get() == Passkey(12345))
        #expect("\(try #require(Passkey(12345)))" == "<passkey>", "its description never shows the digits")
    }

    /// Parsing (every command: forward, readings, check-config) never opens
    /// the file: a missing one, one nobody may read, or one holding garbage
    /// parse; only `tether run` (`loadPasskey`) fails, at passkey_file's line.
    @Test(arguments: [("", 0o000), ("not a passkey\n", 0o600), ("123456\n", 0o644)])
    func parsingNeverReadsThePasskeyFile(_ content: String, _ mode: Int) throws {
        let (directory, path) = try Self.passkeyFile(content, mode: mode)
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        #expect(config.dongle.pairing == .passkey(.file(path)))
        let missing = try Self.passkeyConfig("/nonexistent/tether-passkey")
        let error = try #require(Self.load(missing).failure)
        #expect(error.file == Self.file)
        #expect(error.line == 5)
        #expect(error.message.contains("/nonexistent/tether-passkey"))
        #expect(error.message.contains("No such file"))
    }

    /// The old advice (0640, group tether) and any file others may read are
    /// refused, with how to fix it.
    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o610])
    func aPasskeyFileTheGroupOrOthersMayReadIsRefused(_ mode: Int) throws {
        let (directory, path) = try Self.passkeyFile("123456\n", mode: mode)
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        let error = try #require(Self.load(config).failure)
        #expect(error.line == 5)
        #expect(error.message.contains("group or others may read it"), "\(error)")
        #expect(error.message.contains("chmod 0600") && error.message.contains("LoadCredential="), "\(error)")
        let checked = try #require(Result(catching: { () throws(ConfigError) -> String? in try config.checkPasskeyFile(service: Self.me) }).failure)
        #expect(checked.line == 5)
        #expect(checked.message.contains("group or others may read it"), "\(checked)")
    }

    @Test(arguments: [0o600, 0o400])
    func aPasskeyFileOfTheServicesUserWithMode0600IsRead(_ mode: Int) throws {
        let (directory, path) = try Self.passkeyFile("654321\n", mode: mode)
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        #expect(try Self.load(config).get() == Passkey(654_321))
        let summary = try #require(try config.checkPasskeyFile(service: Self.me))
        #expect(summary.contains("usable by the service's user, test"), "\(summary)")
    }

    /// The owner must be the euid of `tether run`, or root.
    @Test func aPasskeyFileOwnedBySomeoneElseIsRefused() throws {
        let (directory, path) = try Self.passkeyFile("123456\n")
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        // As root, give the file away; otherwise it is ours and the daemon
        // is "someone else" (neither root nor its owner).
        let runAs: UInt32
        if geteuid() == 0 {
            #expect(chown(path, 4242, 4242) == 0)
            runAs = 0
        } else {
            runAs = geteuid() + 1
        }
        let error = try #require(Self.load(config, euid: runAs).failure)
        #expect(error.message.contains("is owned by"), "\(error)")
        #expect(error.message.contains("chown"), "\(error)")
        let checked = try #require(
            Result(catching: { () throws(ConfigError) -> String? in try config.checkPasskeyFile(service: .init(uid: runAs, name: "svc")) }).failure)
        #expect(checked.message.contains("is owned by"), "\(checked)")
    }

    /// check-config's verdict comes from the metadata: a file the service's
    /// user owns with mode 0000 is one it cannot read (unless it is root).
    @Test func checkConfigSaysWhenTheOwnerMayNotReadIt() throws {
        let (directory, path) = try Self.passkeyFile("123456\n", mode: 0o000)
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        guard geteuid() != 0 else { return }
        let checked = try #require(Result(catching: { () throws(ConfigError) -> String? in try config.checkPasskeyFile(service: Self.me) }).failure)
        #expect(checked.message.contains("chmod 0600"), "\(checked)")
    }

    @Test(arguments: ["12345\n", "1234567\n", "12a456\n", "123456\n\n", "", " 123456\n"])
    func aMalformedPasskeyIsRefusedByRun(_ content: String) throws {
        let (directory, path) = try Self.passkeyFile(content)
        defer { directory.remove() }
        let config = try Self.passkeyConfig(path)
        let error = try #require(Self.load(config).failure)
        #expect(error.line == 5)
        #expect(error.message.contains("six-digit passkey"))
        // check-config looks at the owner and mode only.
        #expect(try config.checkPasskeyFile(service: Self.me) != nil)
    }

    /// Without passkey_file the passkey is systemd's credential `passkey`
    /// (LoadCredential=passkey:/etc/tether/passkey), which systemd keeps to
    /// the service: its owner and mode (0400, or 0440 with an ACL) are
    /// systemd's business.
    @Test func withoutPasskeyFileTheSystemdCredentialIsRead() throws {
        let config = try TetherConfig.parse(Self.config("pairing = \"passkey-file\"\n"), file: Self.file)
        #expect(config.dongle.pairing == .passkey(.credential))
        let unset = try #require(Self.load(config).failure)
        #expect(unset.line == 4)
        #expect(unset.message.contains("LoadCredential=passkey:"), "\(unset)")
        #expect(try config.checkPasskeyFile(service: Self.me)?.contains("credential") == true)

        let directory = try TemporaryDirectory("tether-credentials")
        defer { directory.remove() }
        try Data("000042\n".utf8).write(to: URL(fileURLWithPath: directory.path + "/passkey"))
        try FileManager.default.setAttributes([.posixPermissions: 0o440], ofItemAtPath: directory.path + "/passkey")
        let environment = ["CREDENTIALS_DIRECTORY": directory.path + "/"]
        #expect(try Self.load(config, euid: geteuid() + 1, environment: environment).get() == Passkey(42))
        // passkey_file may name the credential too.
        let named = try Self.passkeyConfig(directory.path + "/passkey")
        #expect(try Self.load(named, euid: geteuid() + 1, environment: environment).get() == Passkey(42))
        // Outside the credentials directory the rules hold.
        #expect(Self.load(named, euid: geteuid() + 1).failure != nil)
    }

    /// With name_prefix or service_uuid alone, the passkey would go to the
    /// strongest matching advertiser.
    @Test(arguments: ["name_prefix = \"Tether-\"\n", "service_uuid = \"6e400001-b5a3-f393-e0a9-e50e24dcca9e\"\n"])
    func passkeyFileNeedsTheDonglesAddress(_ identity: String) throws {
        let text = "[dongle]\n" + identity + "pairing = \"passkey-file\"\npasskey_file = \"/etc/tether/passkey\"\n"
        let error = try #require(configRefusal(text))
        #expect(error.file == Self.file)
        #expect(error.line == 3)
        #expect(error.key == "dongle.pairing")
        #expect(error.message.contains("needs dongle.address"), "\(error)")
        #expect(error.message.contains("strongest matching advertiser"), "\(error)")
        // Just Works (no secret to give away) may still find the dongle so.
        let justWorks = try TetherConfig.parse("[dongle]\n" + identity + "pairing = \"just-works\"\n", file: Self.file)
        #expect(justWorks.dongle.pairing == .justWorks)
    }

    @Test func passkeyFileWithoutItsModeIsAnError() throws {
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

    @Test func passkeyParsing() throws {
        #expect(try PasskeyFile.parse(Array("000000".utf8)).get() == Passkey(0))
        #expect(try PasskeyFile.parse(Array("999999\r\n".utf8)).get() == Passkey(999_999))
        #expect((try? PasskeyFile.parse(Array("99999".utf8)).get()) == nil)
    }
}

extension Result {
    fileprivate var failure: Failure? { if case .failure(let failure) = self { failure } else { nil } }
}
