import Configuration
import Testing

@Suite("Config file: [metrics]")
struct MetricsConfigTests {
    static let dongle = "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\n"

    func parse(_ metrics: String) throws(ConfigError) -> TetherConfig {
        try TetherConfig.parse(Self.dongle + "[metrics]\n" + metrics, file: "/etc/tether/tether.toml")
    }

    func problem(_ metrics: String) -> String? {
        do throws(ConfigError) {
            _ = try parse(metrics)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func offUnlessAPathIsGiven() throws {
        let config = try TetherConfig.parse(Self.dongle, file: "f")
        #expect(config.metrics == MetricsSection())
        #expect(config.metrics.textfile == nil && config.metrics.forwardTextfile == nil)
        #expect(config.metrics.interval == .seconds(15))
        #expect(try parse("textfile = \"\"\n").metrics.textfile == nil, "an empty path is off")
    }

    @Test func everyKeyIsRead() throws {
        let metrics = try parse("""
            textfile = "/var/lib/prometheus/node-exporter/tether.prom"
            forward_textfile = "/var/lib/prometheus/node-exporter/tether-forward.prom"
            interval = "30s"

            """).metrics
        #expect(metrics == MetricsSection(
            textfile: "/var/lib/prometheus/node-exporter/tether.prom",
            forwardTextfile: "/var/lib/prometheus/node-exporter/tether-forward.prom", interval: .seconds(30)
        ))
    }

    @Test(arguments: [
        ("textfile = \"tether.prom\"\n", "/etc/tether/tether.toml:5: metrics.textfile: must be an absolute path"),
        ("textfile = \"/var/lib/prometheus/node-exporter/tether.txt\"\n", "metrics.textfile: must name a file ending in .prom"),
        ("forward_textfile = \"/x/.prom\"\n", "metrics.forward_textfile: must name a file ending in .prom"),
        ("textfile = \"/x/a.prom\"\nforward_textfile = \"/x/a.prom\"\n", "metrics.forward_textfile: must differ from textfile"),
        ("interval = \"500ms\"\n", "metrics.interval: must be from 1s to 1h"),
        ("interval = \"2h\"\n", "metrics.interval: must be from 1s to 1h"),
        ("listen = \"127.0.0.1:9100\"\n", "metrics.listen: unknown key"),
    ])
    func badValuesAreNamedWithFileAndLine(text: String, expected: String) {
        let message = problem(text)
        #expect(message?.contains(expected) == true, "\(message ?? "accepted")")
    }
}
