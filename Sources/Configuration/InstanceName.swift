/// Which of several daemons on one gateway a command is about: one daemon per
/// dongle, each a `tether@NAME.service` with its own config, readings
/// directory, bus name and control object.
///
/// The default instance (`tether.service`, no `--instance`) keeps the plain
/// paths, so a gateway with one dongle never needs to know instances exist.
public struct InstanceName: Sendable, Hashable, CustomStringConvertible {
    /// nil for the default instance.
    public let name: String?

    public static let `default` = InstanceName(validated: nil)

    /// Systemd passes the instance (`%i`) through unchanged; these are the
    /// names that are also safe in file names and easy to type.
    public static let allowedCharacters = "letters, digits, '-' and '_' (at most 64, starting with a letter or digit)"

    public init(_ text: String) throws(ConfigError) {
        let bytes = Array(text.utf8)
        func isAlphanumeric(_ b: UInt8) -> Bool {
            (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
                || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
        }
        guard let first = bytes.first, bytes.count <= 64, isAlphanumeric(first),
              bytes.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
        else {
            throw ConfigError(file: "--instance", message: "\(ConfigContext.quoted(text)) is not a valid instance name: use \(Self.allowedCharacters)")
        }
        name = text
    }

    private init(validated: String?) {
        name = validated
    }

    public var description: String { name ?? "default" }

    /// `/etc/tether/tether.toml`, or `/etc/tether/NAME.toml` (the template unit's `%i.toml`).
    public var configPath: String {
        name.map { "/etc/tether/\($0).toml" } ?? TetherConfig.defaultPath
    }

    /// Where readings go when the config does not say: inside the unit's
    /// `StateDirectory=` (`tether`, or `tether/NAME` for the template unit).
    public var defaultReadingsDirectory: String {
        name.map { "/var/lib/tether/\($0)/readings" } ?? "/var/lib/tether/readings"
    }
}
