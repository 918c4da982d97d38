#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who may read `mqtt.password_file`, checked on the descriptor it is read
/// from: whoever reads the file can publish as this gateway.
///
/// - "other" must have no permission at all (a password every local user
///   can read is everyone's);
/// - the group may have permissions only when the file's group is one the
///   forwarder runs as (its gid or a supplementary group: `Group=tether` in
///   the unit), so that sharing the file with the service through its group
///   (0640, `chown root:tether`) works and sharing it with some other group
///   (`adm`, `users`) does not.
public enum SecretFilePermissions {
    /// The groups this process runs as: its effective gid and its
    /// supplementary groups.
    public static func processGroups() -> Set<gid_t> {
        var groups: Set<gid_t> = [getegid()]
        let count = getgroups(0, nil)
        if count > 0 {
            var list = [gid_t](repeating: 0, count: Int(count))
            let got = getgroups(count, &list)
            if got > 0 { groups.formUnion(list.prefix(Int(got))) }
        }
        return groups
    }

    /// What is wrong with a secret file of this mode and group, as a
    /// message saying how to fix it; nil when only its owner, or its owner
    /// and one of `groups`, may read it.
    ///
    /// - Parameters:
    ///   - setting: the key that names the file, for the message (`mqtt.password_file`).
    ///   - groupName: a group's name, for the message (nil: the number is shown).
    public static func problem(
        mode: mode_t, group: gid_t, groups: Set<gid_t>, setting: String,
        groupName: (gid_t) -> String? = SecretFilePermissions.groupName
    ) -> String? {
        let octal = "0" + String(mode & 0o777, radix: 8)
        let fix = "chmod 0600 it (owned by the forwarder's user, tether-forward), or chmod 0640 and chown it to root:tether (a group the forwarder runs as)"
        if mode & 0o007 != 0 {
            let what = mode & 0o004 != 0 ? "every local user may read it" : "every local user has access to it"
            return "\(setting) has mode \(octal): \(what), and it holds a secret; \(fix)"
        }
        if mode & 0o070 != 0, !groups.contains(group) {
            let name = groupName(group).map { "\($0) (gid \(group))" } ?? "gid \(group)"
            let ours = groups.sorted().map { groupName($0) ?? "\($0)" }.joined(separator: ", ")
            return "\(setting) has mode \(octal) and group \(name), a group the forwarder does not run as (it runs as \(ours)): "
                + "that group's members may read a secret; \(fix)"
        }
        return nil
    }

    /// The name of group `gid` in the group database, or nil.
    public static func groupName(_ gid: gid_t) -> String? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        let rc = getgrgid_r(gid, &entry, &buffer, buffer.count, &result)
        guard rc == 0, result != nil, let name = entry.gr_name else { return nil }
        return String(cString: name)
    }
}
