/// systemd unit names as the config may give them: `uart_unit`, which the
/// daemon hands to `systemctl restart` and the polkit rule compares.
public enum UnitName {
    /// A service's name: `NAME.service` or `NAME@INSTANCE.service`, with
    /// only the characters systemd allows in a unit name (letters, digits,
    /// `:`, `-`, `_`, `.`, `\` and the one `@`), at most 255 bytes, and no
    /// leading `-` (which `systemctl` would take for an option).
    public static func isService(_ name: String) -> Bool {
        guard name.utf8.count <= 255, name.hasSuffix(".service"), !name.hasPrefix("-") else { return false }
        let stem = name.dropLast(".service".count)
        guard !stem.isEmpty, stem.filter({ $0 == "@" }).count <= 1, !stem.hasPrefix("@") else { return false }
        return stem.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || ":-_.\\@".unicodeScalars.contains(scalar))
        }
    }
}
