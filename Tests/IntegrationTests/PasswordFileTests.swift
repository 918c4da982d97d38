@testable import Forwarding
import Foundation
import TestSupport
import Testing

/// `mqtt.password_file`: read only when no one but its owner, and the
/// groups the forwarder runs as, may read it.
@Suite struct PasswordFileTests {
    static let ours: Set<gid_t> = [990, 112]
    static func problem(_ mode: mode_t, group: gid_t) -> String? {
        SecretFilePermissions.problem(
            mode: S_IFREG | mode, group: group, groups: ours, setting: "mqtt.password_file",
            groupName: { [990: "tether", 4: "adm", 112: "bluetooth"][$0] }
        )
    }

    @Test func onlyItsOwnerAndTheForwardersGroupsMayReadIt() throws {
        #expect(Self.problem(0o600, group: 4) == nil)
        #expect(Self.problem(0o400, group: 4) == nil)
        #expect(Self.problem(0o640, group: 990) == nil, "0640 root:tether: the unit's Group=")
        #expect(Self.problem(0o660, group: 112) == nil, "a supplementary group")
        let world = try #require(Self.problem(0o644, group: 990))
        #expect(world.contains("mode 0644") && world.contains("every local user may read it"), "\(world)")
        #expect(world.contains("chmod 0600") && world.contains("chmod 0640") && world.contains("root:tether"), "says how to fix it: \(world)")
        #expect(Self.problem(0o604, group: 990) != nil)
        #expect(Self.problem(0o602, group: 990)?.contains("every local user has access to it") == true)
        let foreign = try #require(Self.problem(0o640, group: 4))
        #expect(foreign.contains("mode 0640") && foreign.contains("adm (gid 4)") && foreign.contains("does not run as"), "\(foreign)")
        #expect(foreign.contains("tether") && foreign.contains("chmod 0600"), "\(foreign)")
        #expect(Self.problem(0o620, group: 77)?.contains("gid 77") == true, "a group with no name is told by number")
    }

    @Test func theProcessesGroupsHoldItsGid() {
        #expect(SecretFilePermissions.processGroups().contains(getegid()))
    }

    /// The real file, through the forwarder's start: a world-readable or
    /// foreign-group-readable password is refused naming the file and the
    /// fix, and never read; a private one is, its first line.
    @Test func aPasswordFileOthersMayReadIsRefusedWhenRead() throws {
        let directory = try TemporaryDirectory("password-file")
        defer { directory.remove() }
        let path = directory.path + "/mqtt.password"
        try "s3cret\nignored\n".write(toFile: path, atomically: false, encoding: .utf8)
        var info = stat()
        #expect(stat(path, &info) == 0)

        #expect(chmod(path, 0o644) == 0)
        do {
            _ = try Forwarder.Settings.readSecret(path)
            Issue.record("a world-readable password file was read")
        } catch {
            #expect(error.description.hasPrefix("\(path): mqtt.password_file has mode 0644"), "\(error)")
            #expect(error.description.contains("chmod 0600"), "\(error)")
            #expect(!error.description.contains("s3cret"))
        }

        #expect(chmod(path, 0o640) == 0)
        #expect(try Forwarder.Settings.readSecret(path, groups: [info.st_gid]) == "s3cret", "its group is the forwarder's")
        do {
            _ = try Forwarder.Settings.readSecret(path, groups: [info.st_gid &+ 1])
            Issue.record("a password file readable by a group the forwarder is not in was read")
        } catch {
            #expect(error.description.contains("does not run as"), "\(error)")
        }

        #expect(chmod(path, 0o600) == 0)
        #expect(try Forwarder.Settings.readSecret(path, groups: [info.st_gid &+ 1]) == "s3cret")
    }
}
