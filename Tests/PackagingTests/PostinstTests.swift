import Foundation
import TestSupport
import Testing

/// packaging/deb/postinst's upgrade path, run for real under /bin/sh with
/// every command it calls on the system replaced by a stub that logs its
/// arguments (getent and systemd-sysusers over a fake /etc/group and
/// /etc/passwd, gpasswd, usermod, tether, systemctl, udevadm, dbus-send,
/// deb-systemd-invoke): PATH holds the stubs and the few text tools the
/// script uses, nothing else, so nothing touches this machine's accounts.
/// The config directory is a temporary one (the script's `confdir=` line).
@Suite(.serialized) struct PostinstTests {
    static let script = Packaging.path("packaging/deb/postinst")
    static let confdirLine = "confdir=/etc/tether\n"
    static let tools = ["sh", "cut", "tr", "grep", "sort", "awk", "sed", "basename", "cat", "printf"]
    static var toolsPresent: Bool { tools.allSatisfy { Packaging.which($0) != nil } }

    /// A fake system: its group and passwd files, stubs, a config directory.
    final class FakeSystem {
        let directory: TemporaryDirectory
        var state: String { "\(directory.path)/state" }
        var bin: String { "\(directory.path)/bin" }
        var confdir: String { "\(directory.path)/etc-tether" }
        var log: String { "\(state)/log" }

        init(group: String, passwd: String, omit: Set<String> = [], failing: Set<String> = []) throws {
            directory = try TemporaryDirectory("tether-postinst")
            for path in [state, bin, confdir] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try group.write(toFile: "\(state)/group", atomically: false, encoding: .utf8)
            try passwd.write(toFile: "\(state)/passwd", atomically: false, encoding: .utf8)
            try "".write(toFile: log, atomically: false, encoding: .utf8)
            for tool in PostinstTests.tools {
                let real = try #require(Packaging.which(tool))
                try FileManager.default.createSymbolicLink(atPath: "\(bin)/\(tool)", withDestinationPath: real)
            }
            let logLine = #"echo "$(basename "$0") $*" >> "\#(log)""#
            let stubs: [String: String] = [
                "getent": """
                    case "$1" in
                    group) grep "^$2:" "\(state)/group" || exit 2 ;;
                    passwd) if [ -n "$2" ]; then grep "^$2:" "\(state)/passwd" || exit 2; else cat "\(state)/passwd"; fi ;;
                    *) exit 1 ;;
                    esac
                    """,
                "systemd-sysusers": """
                    \(logLine)
                    grep -q '^tether-admin:' "\(state)/group" || echo 'tether-admin:x:990:' >> "\(state)/group"
                    """,
                "gpasswd": "\(logLine)\n" + (failing.contains("gpasswd") ? "exit 1" : "exit 0"),
                "usermod": "\(logLine)\nexit 0",
                // check-config: a file whose name has "bad" in it is refused as
                // 1.x refuses a group-readable passkey file.
                "tether": """
                    \(logLine)
                    for last in "$@"; do :; done
                    case "$last" in
                    *bad*) echo "$last:7: dongle.passkey_file: /etc/tether/passkey: its group or others may read it (mode 0640)" >&2; exit 78 ;;
                    esac
                    \(failing.contains("tether") ? "exit 1" : #"echo "$last: OK""#)
                    """,
                "systemctl": "\(logLine)\nexit 0",
                "udevadm": "\(logLine)\nexit 0",
                "dbus-send": "\(logLine)\nexit 0",
                "deb-systemd-invoke": "\(logLine)\nexit 0",
            ]
            // A shell writes the stubs, not this process: a file this process
            // had open for writing could leak into a child another test forks
            // at that moment, and executing it would then fail with ETXTBSY.
            var setup = "set -e\n"
            for (name, body) in stubs.sorted(by: { $0.key < $1.key }) where !omit.contains(name) {
                setup += "cat > '\(bin)/\(name)' <<'STUB_EOF'\n#!/bin/sh\n\(body)\nSTUB_EOF\nchmod 0755 '\(bin)/\(name)'\n"
            }
            let script = "\(directory.path)/make-stubs.sh"
            try setup.write(toFile: script, atomically: false, encoding: .utf8)
            let made = try Packaging.run("/bin/sh", [script])
            try #require(made.status == 0, "writing the stubs: \(made)")
        }

        struct Run {
            var status: Int32
            var stdout: String
            var stderr: String
            var log: [String]
        }

        /// `postinst configure [OLD-VERSION]`, with the fake system's PATH and
        /// config directory.
        func postinst(_ arguments: [String]) throws -> Run {
            let original = try Packaging.read(PostinstTests.script)
            try #require(original.contains(PostinstTests.confdirLine), "postinst has no \(PostinstTests.confdirLine)")
            let copy = "\(directory.path)/postinst"
            try original.replacingOccurrences(of: PostinstTests.confdirLine, with: "confdir=\(confdir)\n")
                .write(toFile: copy, atomically: false, encoding: .utf8)
            try "".write(toFile: log, atomically: false, encoding: .utf8)
            let out = "\(directory.path)/stdout", err = "\(directory.path)/stderr"
            let result = try Packaging.run(
                "/bin/sh", ["-c", #"/bin/sh "$0" "$@" >"$POSTINST_OUT" 2>"$POSTINST_ERR""#, copy] + arguments,
                environment: ["PATH": bin, "POSTINST_OUT": out, "POSTINST_ERR": err], timeout: .seconds(60))
            return Run(
                status: result.status, stdout: try Packaging.read(out), stderr: try Packaging.read(err),
                log: try Packaging.read(log).split(separator: "\n").map(String.init))
        }

        func remove() { directory.remove() }
    }

    /// Group tether before this version: the forwarder, two operators by
    /// membership; carol has it as her primary group; dave has nothing to do with it.
    static let oldGroup = """
        tether:x:995:tether-forward,alice,bob
        bluetooth:x:996:tether
        dave:x:1002:

        """
    static let oldPasswd = """
        tether:x:995:995:Tether BLE dongle keeper:/var/lib/tether:/usr/sbin/nologin
        tether-forward:x:994:995:Tether MQTT forwarder:/var/lib/tether-forward:/usr/sbin/nologin
        carol:x:1001:995::/home/carol:/bin/sh
        dave:x:1002:1002::/home/dave:/bin/sh

        """

    @Test(.enabled(if: toolsPresent, "needs sh and the text tools"))
    func theUpgradeThatBringsTetherAdminMovesGroupTethersPeopleIntoItAndSaysSoOnce() throws {
        let system = try FakeSystem(group: Self.oldGroup, passwd: Self.oldPasswd)
        defer { system.remove() }

        let upgrade = try system.postinst(["configure", "0.1.0~git20250101.abcdef0"])
        #expect(upgrade.status == 0, "\(upgrade)")
        #expect(upgrade.log.contains("systemd-sysusers tether.conf"))
        let added = upgrade.log.filter { $0.hasPrefix("gpasswd ") }
        #expect(added == ["gpasswd -a alice tether-admin", "gpasswd -a bob tether-admin", "gpasswd -a carol tether-admin"],
                "every member of group tether but the service users, primary members too: \(upgrade.log)")
        #expect(upgrade.stdout.isEmpty, "the notices go to stderr: \(upgrade.stdout)")
        let notice = upgrade.stderr
        #expect(notice.contains("Added to group tether-admin, so that they keep tether reconnect: alice bob carol"), "\(notice)")
        #expect(notice.contains("group tether: reading the readings"), "\(notice)")
        #expect(notice.contains("group tether-admin (new): tether reconnect"), "\(notice)")
        #expect(notice.contains("/dev/rfkill") && notice.contains("/dev/bus/usb") && notice.contains("service's user tether only"), "\(notice)")
        #expect(notice.contains("gpasswd -d NAME tether-admin"), "how a reader drops what it does not need: \(notice)")
        #expect(notice.components(separatedBy: "rights are split").count == 2, "said once: \(notice)")
        // Where udev runs (/run/udev), it applies the new owner to the nodes already there.
        if upgrade.log.contains("udevadm control --reload") {
            #expect(upgrade.log.contains { $0.hasPrefix("udevadm trigger") && $0.contains("rfkill") }, "\(upgrade.log)")
            #expect(upgrade.log.contains { $0.hasPrefix("udevadm trigger") && $0.contains("usb_device") }, "\(upgrade.log)")
        }

        // The next upgrade: tether-admin exists, nobody is moved again, nothing said.
        let next = try system.postinst(["configure", "0.1.1"])
        #expect(next.status == 0, "\(next)")
        #expect(!next.log.contains { $0.hasPrefix("gpasswd") }, "\(next.log)")
        #expect(!next.stderr.contains("tether-admin"), "\(next.stderr)")
    }

    @Test(.enabled(if: toolsPresent, "needs sh and the text tools"))
    func aFreshInstallMovesNobodyAndSaysNothing() throws {
        let system = try FakeSystem(group: Self.oldGroup, passwd: Self.oldPasswd)
        defer { system.remove() }
        try "[dongle]\n".write(toFile: "\(system.confdir)/bad.toml", atomically: false, encoding: .utf8)
        let install = try system.postinst(["configure"])
        #expect(install.status == 0, "\(install)")
        #expect(install.log.contains("systemd-sysusers tether.conf"))
        #expect(!install.log.contains { $0.hasPrefix("gpasswd") || $0.hasPrefix("usermod") || $0.hasPrefix("tether ") }, "\(install.log)")
        #expect(install.stderr.isEmpty, "\(install.stderr)")
    }

    /// Every config in the directory is checked on an upgrade, as the unit
    /// that reads it would; a refused one is said with check-config's words.
    @Test(.enabled(if: toolsPresent, "needs sh and the text tools"))
    func everyConfigIsCheckedOnAnUpgradeAndARefusedOneIsSaid() throws {
        let system = try FakeSystem(group: Self.oldGroup + "tether-admin:x:990:alice\n", passwd: Self.oldPasswd)
        defer { system.remove() }
        for name in ["tether.toml", "left.toml", "bad.toml"] {
            try "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n".write(toFile: "\(system.confdir)/\(name)", atomically: false, encoding: .utf8)
        }
        let upgrade = try system.postinst(["configure", "0.1.0"])
        #expect(upgrade.status == 0, "a refused config must not fail the upgrade: \(upgrade)")
        let checks = Set(upgrade.log.filter { $0.hasPrefix("tether ") })
        #expect(checks == [
            "tether check-config \(system.confdir)/tether.toml",
            "tether check-config --instance left \(system.confdir)/left.toml",
            "tether check-config --instance bad \(system.confdir)/bad.toml",
        ], "\(upgrade.log)")
        #expect(upgrade.stderr.contains("tether check-config \(system.confdir)/bad.toml failed (exit 78); tether@bad.service will not start with it"), "\(upgrade.stderr)")
        #expect(upgrade.stderr.contains("  \(system.confdir)/bad.toml:7: dongle.passkey_file: /etc/tether/passkey: its group or others may read it (mode 0640)"), "\(upgrade.stderr)")
        #expect(upgrade.stderr.contains("sudo systemctl restart tether@bad.service"), "\(upgrade.stderr)")
        #expect(!upgrade.stderr.contains("left.toml") && !upgrade.stderr.contains("\(system.confdir)/tether.toml"), "good configs say nothing: \(upgrade.stderr)")
        #expect(!upgrade.stderr.contains("rights are split"), "tether-admin existed: \(upgrade.stderr)")
        #expect(!upgrade.log.contains { $0.hasPrefix("gpasswd") })
    }

    /// Nothing in the notices can fail the upgrade: gpasswd refusing, a
    /// check-config that fails without a word, no gpasswd (then usermod), no
    /// tether binary on PATH.
    @Test(.enabled(if: toolsPresent, "needs sh and the text tools"))
    func failingNoticesNeverFailTheUpgrade() throws {
        let failing = try FakeSystem(group: Self.oldGroup, passwd: Self.oldPasswd, failing: ["gpasswd", "tether"])
        defer { failing.remove() }
        try "".write(toFile: "\(failing.confdir)/tether.toml", atomically: false, encoding: .utf8)
        let refused = try failing.postinst(["configure", "0.1.0"])
        #expect(refused.status == 0, "\(refused)")
        #expect(refused.stderr.contains("Could not add to group tether-admin: alice bob carol"), "\(refused.stderr)")
        #expect(refused.stderr.contains("check-config \(failing.confdir)/tether.toml failed (exit 1); tether.service"), "\(refused.stderr)")

        let bare = try FakeSystem(group: Self.oldGroup, passwd: Self.oldPasswd, omit: ["gpasswd", "tether"])
        defer { bare.remove() }
        try "".write(toFile: "\(bare.confdir)/tether.toml", atomically: false, encoding: .utf8)
        let withUsermod = try bare.postinst(["configure", "0.1.0"])
        #expect(withUsermod.status == 0, "\(withUsermod)")
        #expect(withUsermod.log.filter { $0.hasPrefix("usermod") } == [
            "usermod -a -G tether-admin alice", "usermod -a -G tether-admin bob", "usermod -a -G tether-admin carol",
        ], "\(withUsermod.log)")
        #expect(!withUsermod.stderr.contains("check-config"), "\(withUsermod.stderr)")
    }

    /// postrm removes no user and no group, on purge either (Debian's practice).
    @Test func purgeKeepsTheUsersAndGroups() throws {
        let postrm = try Packaging.read(Packaging.path("packaging/deb/postrm"))
        for tool in ["deluser", "delgroup", "userdel", "groupdel", "gpasswd"] {
            #expect(!postrm.contains(tool), "postrm calls \(tool)")
        }
        #expect(postrm.contains("tether-admin"), "postrm's comment names the groups it keeps")
    }
}
