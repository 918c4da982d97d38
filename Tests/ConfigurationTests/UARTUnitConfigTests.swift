import Configuration
import Testing

/// `reconnect.uart_unit`: the service `uart-reattach` restarts, handed to
/// systemctl and compared by the polkit rule, so only a service's name.
@Suite struct UARTUnitConfigTests {
    static let dongle = "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n"

    @Test func theDefaultIsRaspberryPiOSsUnit() throws {
        let config = try TetherConfig.parse(Self.dongle, file: "f")
        #expect(config.reconnect.uartUnit == "hciuart.service")
    }

    @Test func aServiceIsTakenWithTheStep() throws {
        let config = try TetherConfig.parse(
            Self.dongle + "[reconnect]\nescalate = [\"hci-reset\", \"uart-reattach\"]\nuart_unit = \"btattach@ttyAMA0.service\"\n", file: "f")
        #expect(config.reconnect.uartUnit == "btattach@ttyAMA0.service")
        #expect(config.reconnect.escalate == [.hciReset, .uartReattach])
    }

    @Test(arguments: ["hciuart", "-hciuart.service", "hci uart.service", "hciuart.socket", "../x.service", "a@b@c.service", "@.service", ".service"])
    func anythingButAServicesNameIsRefused(unit: String) throws {
        #expect(throws: ConfigError.self) {
            try TetherConfig.parse(Self.dongle + "[reconnect]\nuart_unit = \"\(unit)\"\n", file: "f")
        }
    }

    @Test func unitNames() {
        #expect(UnitName.isService("hciuart.service"))
        #expect(UnitName.isService("serial-getty@ttyS0.service"))
        #expect(UnitName.isService("a\\x2db.service"))
        #expect(!UnitName.isService("hciuart.service\n"))
        #expect(!UnitName.isService("../x.service"))
    }
}
