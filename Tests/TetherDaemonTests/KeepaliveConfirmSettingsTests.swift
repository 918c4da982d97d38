import Configuration
import LinkSupervisor
import TetherDaemon
import Testing

/// The config's keys as the supervisor's settings (`Supervisor.Settings(config:)`,
/// the daemon's mapping): `keepalive.confirm_every`, how often a write
/// command's poll waits for bluetoothd's answer, and `reconnect.scan_stall_after`.
@Suite struct KeepaliveConfirmSettingsTests {
    static func settings(_ keepalive: String) throws -> Supervisor.Settings {
        let config = try TetherConfig.parse(
            "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n[keepalive]\n\(keepalive)\n", file: "/etc/tether/tether.toml"
        )
        return Supervisor.Settings(config: config)
    }

    @Test func aWriteCommandWaitsForAnAnswerEveryFiveSecondsByDefault() throws {
        #expect(try Self.settings("").keepaliveConfirmEvery == .seconds(5))
        #expect(try Self.settings("interval = \"1s\"\ntimeout = \"800ms\"").keepaliveConfirmEvery == .seconds(5))
    }

    @Test func confirmEveryIsTheConfiguredDuration() throws {
        #expect(try Self.settings("confirm_every = \"30s\"").keepaliveConfirmEvery == .seconds(30))
    }

    @Test func zeroMakesEveryPollWait() throws {
        #expect(try Self.settings("confirm_every = \"0s\"").keepaliveConfirmEvery == nil)
    }

    /// A read's answer is the reading, and a write request's answer is the
    /// dongle's: neither is sent without waiting, whatever confirm_every says.
    @Test func readsAndWriteRequestsAlwaysWait() throws {
        #expect(try Self.settings("write_type = \"request\"\nconfirm_every = \"30s\"").keepaliveConfirmEvery == nil)
        let read = "write = \"\"\ncharacteristic = \"00002a19-0000-1000-8000-00805f9b34fb\"\nconfirm_every = \"30s\""
        #expect(try Self.settings(read).keepaliveConfirmEvery == nil)
    }

    @Test func scanStallAfterReachesTheSupervisor() throws {
        let file = "/etc/tether/tether.toml"
        let minimal = "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\n"
        let configured = try TetherConfig.parse(minimal + "[reconnect]\nscan_stall_after = \"45s\"\n", file: file)
        #expect(Supervisor.Settings(config: configured).scanStallAfter == .seconds(45))
        #expect(Supervisor.Settings(config: try TetherConfig.parse(minimal, file: file)).scanStallAfter == .seconds(120))
    }
}
