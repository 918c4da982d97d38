import FoundationEssentials
import LinkPolicy

/// Which systemd units the service's user may restart: exactly those that
/// configs in the config directory name as `reconnect.uart_unit` with
/// `uart-reattach` among their steps. The package's polkit rule asks this
/// (`tether polkit-check-unit`) for each restart user `tether` requests.
///
/// A config that cannot be read or parsed allows nothing (it fails closed:
/// polkitd's user must be able to read it).
public enum UnitRestartPermission {
    public static let configDirectory = "/etc/tether"

    /// The units the configs allow, each with the config that names it.
    public static func allowedUnits(configs: [(path: String, text: String)]) -> [String: String] {
        var allowed: [String: String] = [:]
        for (path, text) in configs {
            guard let config = try? TetherConfig.parse(text, file: path),
                  config.reconnect.escalate.contains(.uartReattach)
            else { continue }
            allowed[config.reconnect.uartUnit] = allowed[config.reconnect.uartUnit] ?? path
        }
        return allowed
    }

    /// The `*.toml` files of `directory` (`tether.toml` and each instance's `NAME.toml`), read.
    public static func configs(in directory: String = Self.configDirectory) -> [(path: String, text: String)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".toml") }.sorted().compactMap { name in
            let path = "\(directory)/\(name)"
            guard let data = FileManager.default.contents(atPath: path) else { return nil }
            return (path, String(decoding: data, as: UTF8.self))
        }
    }
}
