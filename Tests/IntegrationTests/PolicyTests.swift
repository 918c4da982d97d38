import ChildProcess
import DBus
import Foundation
import Simulator
import TestSupport
import Testing
import TetherDaemon

/// What the policy test needs of the machine; outside the suite because a
/// suite's traits cannot refer to the suite itself.
enum PolicyTestRequirements {
    /// In group tether-admin only: may call Reconnect.
    static let operatorUser = "tether-test-op"
    /// In group tether only: may read the readings, not call Reconnect.
    static let readerUser = "tether-test-reader"
    static let tools = ["/usr/sbin/useradd", "/usr/sbin/userdel", "/usr/sbin/groupadd", "/usr/bin/setpriv"]

    static var met: Bool {
        getuid() == 0 && tools.allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static var unmet: Comment {
        getuid() != 0
            ? "needs root: it creates the users tether, \(operatorUser) and \(readerUser) and runs commands as them (CI runs it as root)"
            : "needs \(tools.joined(separator: ", "))"
    }
}

/// The shipped D-Bus policy (systemd/io.tether.Tether.conf), enforced for
/// real: a dbus-daemon with a system-bus configuration (deny by default)
/// that includes the file, the daemon running as user `tether`, and
/// clients running as other users through setpriv.
///
/// Needs root, to create the users and switch to them; skipped otherwise.
@Suite(.serialized, .enabled(if: PolicyTestRequirements.met, PolicyTestRequirements.unmet))
struct PolicyTests {
    static let operatorUser = PolicyTestRequirements.operatorUser
    static let readerUser = PolicyTestRequirements.readerUser

    static var policyFile: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("systemd/io.tether.Tether.conf")
    }

    /// Debian's system.conf, minus what a test bus cannot have (a user to
    /// switch to, activation, syslog), plus a stand-in for bluez's own
    /// policy so that the simulator may own org.bluez, then our file.
    static func systemBusConfig(socket: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(socket)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <deny own="*"/>
            <deny send_type="method_call"/>
            <allow send_type="signal"/>
            <allow send_requested_reply="true" send_type="method_return"/>
            <allow send_requested_reply="true" send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="method_return"/>
            <allow receive_type="error"/>
            <allow receive_type="signal"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
          </policy>
          <!-- as bluez's bluetooth.conf: root owns org.bluez, others may call it -->
          <policy user="root">
            <allow own="org.bluez"/>
            <allow own="io.tether.Simulator"/>
          </policy>
          <policy context="default">
            <allow send_destination="org.bluez"/>
            <allow send_destination="io.tether.Simulator"/>
          </policy>
          <include>\(policyFile.path)</include>
        </busconfig>
        """
    }

    /// Creates what the policy names, if missing; removes only what it created.
    final class Accounts {
        private var createdUsers: [String] = []
        private var createdGroups: [String] = []

        func ensure() throws {
            for group in ["tether", "tether-admin"] where getgrnam(group) == nil {
                try Self.tool("/usr/sbin/groupadd", ["--system", group])
                createdGroups.append(group)
            }
            if getpwnam("tether") == nil {
                try Self.tool("/usr/sbin/useradd", ["--system", "--gid", "tether", "--no-create-home", "--shell", "/usr/sbin/nologin", "tether"])
                createdUsers.append("tether")
            }
            // The operator: group tether-admin alone (no readings); the
            // reader: group tether alone (the readings, no Reconnect).
            for (user, group) in [(PolicyTests.operatorUser, "tether-admin"), (PolicyTests.readerUser, "tether")]
            where getpwnam(user) == nil {
                try Self.tool("/usr/sbin/useradd", ["--system", "--no-create-home", "--user-group", "--groups", group, "--shell", "/usr/sbin/nologin", user])
                createdUsers.append(user)
            }
        }

        func remove() {
            for user in createdUsers.reversed() { try? Self.tool("/usr/sbin/userdel", [user]) }
            // userdel may already have removed a user's own group.
            for group in createdGroups.reversed() where getgrnam(group) != nil {
                try? Self.tool("/usr/sbin/groupdel", [group])
            }
        }

        static func tool(_ path: String, _ arguments: [String]) throws {
            let process = try ChildProcess(executable: path, arguments: arguments)
            let status = process.wait(timeout: .seconds(30))
            guard ChildProcess.exitCode(status) == 0 else {
                throw BusDaemonError.didNotStart  // any error: the test reports it
            }
        }
    }

    @Test func onlyRootAndGroupTetherAdminMayReconnectAndOnlyUserTetherMayOwnTheName() async throws {
        let accounts = Accounts()
        try accounts.ensure()
        defer { accounts.remove() }

        let directory = try TemporaryDirectory("tether-policy")
        defer { directory.remove() }
        // Other users must reach the bus socket, the config, the binary and their readings.
        chmod(directory.path, 0o755)
        let busDirectory = directory.url.appendingPathComponent("bus")
        try FileManager.default.createDirectory(at: busDirectory, withIntermediateDirectories: true)
        chmod(busDirectory.path, 0o755)
        let busConfig = directory.url.appendingPathComponent("system.conf")
        try Self.systemBusConfig(socket: busDirectory.appendingPathComponent("bus").path)
            .write(to: busConfig, atomically: false, encoding: .utf8)
        let busDaemon = try BusDaemonProcess(directory: busDirectory, configFile: busConfig)
        defer { busDaemon.stop() }
        let simulator = try await Simulator.start(busAddress: busDaemon.address)

        let readings = directory.url.appendingPathComponent("readings").path
        let thiefReadings = directory.url.appendingPathComponent("thief").path
        for path in [readings, thiefReadings] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        let tetherUser = try #require(getpwnam("tether")).pointee
        chown(readings, tetherUser.pw_uid, tetherUser.pw_gid)
        // As the unit's StateDirectoryMode=0750: the daemon and group tether.
        chmod(readings, 0o750)
        chmod(thiefReadings, 0o777)
        let config = directory.url.appendingPathComponent("tether.toml").path
        try "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n[readings]\ndirectory = \"\(readings)\"\n"
            .write(toFile: config, atomically: false, encoding: .utf8)
        let thiefConfig = directory.url.appendingPathComponent("thief.toml").path
        try "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n[readings]\ndirectory = \"\(thiefReadings)\"\n"
            .write(toFile: thiefConfig, atomically: false, encoding: .utf8)
        for path in [config, thiefConfig] { chmod(path, 0o644) }

        let root = try await Bus.connect(address: busDaemon.address)
        let environment = ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": busDaemon.address]) { $1 }
        let daemon = try ChildProcess(
            executable: TetherCommand.setpriv,
            arguments: ["--reuid", "tether", "--regid", "tether", "--init-groups", DaemonProcessTests.tetherPath, "run", "--config", config],
            environment: environment, stderrPath: directory.url.appendingPathComponent("daemon.log").path
        )
        let tether = TetherCommand(directory: directory.url, busAddress: busDaemon.address)
        let log = { (try? String(contentsOfFile: directory.url.appendingPathComponent("daemon.log").path, encoding: .utf8)) ?? "" }

        #expect(await eventually { (try? await root.nameOwner(of: "io.tether.Tether")) != nil }, "daemon as user tether never owned its name:\n\(log())")
        #expect(await eventually(timeout: .seconds(15)) {
            (try? await tether.run(["status", "--json"]).stdout.contains(#""state":"online""#)) ?? false
        })

        let reader = TetherCommand.User.named(Self.readerUser, group: Self.readerUser)
        let admin = TetherCommand.User.named(Self.operatorUser, group: Self.operatorUser)

        // Reading status: anyone, in any group or none.
        for (who, identity) in [("nobody", TetherCommand.User.bare("nobody", group: "nogroup")), ("reader", reader), ("operator", admin)] {
            let status = try await tether.run(["status"], as: identity)
            #expect(status.status == 0 && status.stdout.contains("online"), "\(who): \(status.all)")
        }

        // Reconnect: AccessDenied for nobody and for a member of group tether
        // (the readers' group) alone, each told the group that grants it.
        for (who, identity) in [("nobody", TetherCommand.User.bare("nobody", group: "nogroup")), ("reader", reader)] {
            let denied = try await tether.run(["reconnect"], as: identity)
            #expect(denied.status == 4, "\(who): \(denied.all)")
            #expect(denied.stderr.contains("permission denied: the D-Bus policy lets only root and members of group 'tether-admin'")
                        && denied.stderr.contains("you are not in group 'tether-admin'")
                        && denied.stderr.contains("sudo usermod -aG tether-admin $USER"), "\(who): \(denied.all)")
            print("figure: policy: \(who)'s reconnect → exit \(denied.status.map(String.init) ?? "?"): \(denied.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
        }

        // Rebind: the same rule. This daemon's config names the address, so
        // a caller the policy lets through gets the daemon's NotBound.
        let readerRebind = try await tether.run(["rebind"], as: reader)
        #expect(readerRebind.status == 4, "\(readerRebind.all)")
        let adminRebind = try await tether.run(["rebind"], as: admin)
        #expect(adminRebind.status == 1 && adminRebind.stderr.contains("nothing to rebind"), "\(adminRebind.all)")

        // …allowed for a member of group tether-admin (without group tether), and for root.
        let member = try await tether.run(["reconnect", "--wait", "--timeout", "20s"], as: admin)
        #expect(member.status == 0, "\(member.all)")
        let asRoot = try await tether.run(["reconnect", "--wait", "--timeout", "20s"])
        #expect(asRoot.status == 0, "\(asRoot.all)")

        // The readings: group tether's (the reader), not everyone's.
        #expect(await eventually(timeout: .seconds(15), every: .milliseconds(500)) {
            let read = try? await tether.run(["readings", "--directory", readings], as: reader)
            return read?.status == 0 && read?.stdout.contains("\"seq\"") == true
        }, "the reader (group tether) could not read the readings")
        let nobodyReadings = try await tether.run(["readings", "--directory", readings], as: .bare("nobody", group: "nogroup"))
        #expect(nobodyReadings.status != 0 && !nobodyReadings.stdout.contains("\"seq\""), "\(nobodyReadings.all)")

        // Nobody else may own the names: not root, not another user.
        for name in ["io.tether.Tether", "io.tether.Tether.thief"] {
            do {
                try await root.requestName(name)
                Issue.record("root took \(name)")
            } catch {
                #expect(error.name == DBusErrorName.accessDenied, "\(error)")
            }
        }
        let thief = try await tether.run(["run", "--instance", "thief", "--config", thiefConfig], as: .bare("nobody", group: "nogroup"), timeout: .seconds(20))
        #expect(thief.status == 77, "a daemon as nobody must exit EX_NOPERM: \(thief.all)")
        #expect(thief.stderr.contains("does not let this user own io.tether.Tether.thief"), "\(thief.all)")

        let status = daemon.terminate()
        #expect(ChildProcess.exitCode(status) == 0, "daemon log:\n\(log())")
        await root.close()
        await simulator.stop()
    }
}
