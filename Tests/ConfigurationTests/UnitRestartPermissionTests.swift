import Configuration
import Testing

/// The polkit rule lets user `tether` restart exactly the units the configs
/// name for `uart-reattach`, nothing else.
@Suite struct UnitRestartPermissionTests {
    static let dongle = "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n"

    @Test func onlyAUnitNamedWithTheStepIsAllowed() {
        let allowed = UnitRestartPermission.allowedUnits(configs: [
            ("/etc/tether/tether.toml", Self.dongle + "[reconnect]\nescalate = [\"uart-reattach\"]\n"),
            ("/etc/tether/east.toml", Self.dongle + "[reconnect]\nescalate = [\"uart-reattach\"]\nuart_unit = \"btattach@ttyS0.service\"\n"),
            // Named, but the step is not listed: the unit is not for Tether to restart.
            ("/etc/tether/west.toml", Self.dongle + "[reconnect]\nescalate = [\"hci-reset\"]\nuart_unit = \"bluetooth.service\"\n"),
            // Broken: allows nothing.
            ("/etc/tether/broken.toml", "[reconnect]\nescalate = [\"uart-reattach\"]\nuart_unit = \"ssh.service\"\n"),
        ])
        #expect(allowed == ["hciuart.service": "/etc/tether/tether.toml", "btattach@ttyS0.service": "/etc/tether/east.toml"])
        #expect(allowed["bluetooth.service"] == nil && allowed["ssh.service"] == nil)
    }

    @Test func noConfigAllowsNothing() {
        #expect(UnitRestartPermission.allowedUnits(configs: []).isEmpty)
        #expect(UnitRestartPermission.configs(in: "/nonexistent/tether").isEmpty)
    }
}
