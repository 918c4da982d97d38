import ArgumentParser

@main
struct Tether: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tether",
        abstract: "Keeps a Nordic BLE telemetry dongle awake and connected through BlueZ, and logs its readings.",
        discussion: """
            Tether talks to bluetoothd over D-Bus on the system bus (or DBUS_SYSTEM_BUS_ADDRESS), \
            polls the dongle so it never reaches its idle-sleep deadline, reconnects after every \
            drop within bounded retry windows, and writes every notification to JSON Lines files.

            Watch it:       tether status, journalctl -u tether -f
            Steer it:       tether reconnect --wait
            Deliver it:     tether forward (readings to an MQTT broker)
            Without hardware:  tether-dev demo (from a source build)
            """,
        version: "0.1.0",
        subcommands: [
            RunCommand.self, StatusCommand.self, ReconnectCommand.self, ScanCommand.self, ReadingsCommand.self,
            CheckConfigCommand.self, ForwardCommand.self,
        ]
    )
}
