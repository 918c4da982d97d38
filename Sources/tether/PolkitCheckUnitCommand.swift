import ArgumentParser
import Configuration

/// Asked by the package's polkit rule (60-tether.rules) whenever user
/// `tether` asks systemd to restart a unit: exit 0 lets it, anything else
/// leaves the request to the other rules (refused by default).
struct PolkitCheckUnitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "polkit-check-unit",
        abstract: "Exit 0 if a config in /etc/tether lets the service restart UNIT (for the package's polkit rule).",
        discussion: """
            UNIT is allowed when a config in the config directory lists "uart-reattach" in reconnect.escalate \
            and names UNIT as reconnect.uart_unit. A config that cannot be read or parsed allows nothing. \
            polkitd runs this as its own user, so the configs must be readable by it. Exit status: 0 allowed, \
            1 not allowed.
            """,
        shouldDisplay: false
    )

    @Option(help: "Where the configs are.")
    var configDirectory = UnitRestartPermission.configDirectory

    @Argument(help: "The unit systemd was asked to restart.")
    var unit: String

    func run() throws {
        let allowed = UnitRestartPermission.allowedUnits(configs: UnitRestartPermission.configs(in: configDirectory))
        guard let by = allowed[unit] else {
            StandardError.emit("\(unit): no config in \(configDirectory) names it as reconnect.uart_unit with uart-reattach\n")
            throw ExitCode(1)
        }
        print("\(unit): allowed by \(by)")
    }
}
