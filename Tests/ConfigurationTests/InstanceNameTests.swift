@testable import Configuration
import Testing

@Suite struct InstanceNameTests {
    @Test func theDefaultInstanceKeepsThePlainPaths() {
        #expect(InstanceName.default.configPath == "/etc/tether/tether.toml")
        #expect(InstanceName.default.defaultReadingsDirectory == "/var/lib/tether/readings")
        #expect(InstanceName.default.description == "default")
    }

    @Test func aNamedInstanceHasItsOwnConfigAndReadings() throws {
        let east = try InstanceName("east-1")
        #expect(east.configPath == "/etc/tether/east-1.toml")
        #expect(east.defaultReadingsDirectory == "/var/lib/tether/east-1/readings")
        let config = try TetherConfig.parse("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n", file: "x", instance: east)
        #expect(config.readings.directory == "/var/lib/tether/east-1/readings")
        let explicit = try TetherConfig.parse(
            "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n[readings]\ndirectory = \"/data/r\"\n", file: "x", instance: east
        )
        #expect(explicit.readings.directory == "/data/r", "the config's own directory wins")
    }

    @Test(arguments: ["", "-east", "_x", "a/b", "..", "a.b", "é", String(repeating: "a", count: 65), "a b"])
    func unsafeNamesAreRefused(_ name: String) {
        #expect(throws: ConfigError.self) { try InstanceName(name) }
    }

    @Test(arguments: ["a", "1", "east_1", "East-2", String(repeating: "z", count: 64)])
    func fileNameSafeNamesAreAccepted(_ name: String) throws {
        #expect(try InstanceName(name).name == name)
    }
}
