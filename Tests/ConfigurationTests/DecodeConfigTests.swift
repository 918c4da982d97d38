import Configuration
import PayloadLayout
import Testing

@Suite("Config file: [decode]")
struct DecodeConfigTests {
    static let dongle = "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\n"

    func parse(_ decode: String) throws(ConfigError) -> TetherConfig {
        try TetherConfig.parse(Self.dongle + "[decode]\n" + decode, file: "/etc/tether/tether.toml")
    }

    func problem(_ decode: String) -> String? {
        do throws(ConfigError) {
            _ = try parse(decode)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func absentMeansHexAlone() throws {
        #expect(try TetherConfig.parse(Self.dongle, file: "f").decode == nil)
    }

    /// The simulated dongle's payload, as docs/configuration.md and the
    /// example config declare it.
    @Test func theSimulatorsDongleIsDeclared() throws {
        let layout = try #require(try parse("""
            fields = ["sequence:u32le", "temperature_c:i16le*0.01", "humidity_pct:u16le*0.01"]
            characteristic = "6E400003-B5A3-F393-E0A9-E50E24DCCA9E"

            """).decode)
        #expect(layout.size == 8)
        #expect(layout.characteristic == "6e400003-b5a3-f393-e0a9-e50e24dcca9e")
        #expect(layout.fields.map(\.name) == ["sequence", "temperature_c", "humidity_pct"])
        #expect(layout.fields[1] == PayloadLayout.Field(name: "temperature_c", kind: .signed(bytes: 2, bigEndian: false), scale: 0.01))
    }

    @Test(arguments: [
        ("fields = [\"t:i17le\"]\n", "/etc/tether/tether.toml:5: decode.fields: field 1, \"t:i17le\": unknown type \"i17le\""),
        ("fields = [\"a:u8\", \"temperature\"]\n", "decode.fields: field 2, \"temperature\": expected name:type"),
        ("fields = [\"a:u8\", \"a:u16le\"]\n", "decode.fields: the field name a is used twice"),
        ("fields = [\"t-x:u8\"]\n", "a field name is letters, digits and _"),
        ("fields = [\"t:bytes4*2\"]\n", "a scale applies to numbers, not bytes"),
        ("fields = [\"t:u8*0\"]\n", "the scale after * must be a non-zero number"),
        ("fields = [\"_:u8\"]\n", "declares no field (only padding)"),
        ("fields = [\"a:bytes512\", \"b:u8\"]\n", "declares 513 bytes, more than a notification can hold (512)"),
        ("fields = \"a:u8\"\n", "decode.fields: expected"),
        ("characteristic = \"6e400003-b5a3-f393-e0a9-e50e24dcca9e\"\n", "decode.fields: missing"),
        ("fields = [\"a:u8\"]\ncharacteristic = \"nope\"\n", "decode.characteristic"),
        ("fields = [\"a:u8\"]\nscale = 2\n", "decode.scale: unknown key"),
    ])
    func badDeclarationsAreNamedWithFileAndLine(text: String, expected: String) {
        let message = problem(text)
        #expect(message?.contains(expected) == true, "\(message ?? "accepted")")
    }
}
