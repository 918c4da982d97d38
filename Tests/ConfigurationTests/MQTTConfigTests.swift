import Configuration
import Foundation
import Testing

@Suite("Config file: [mqtt]")
struct MQTTConfigTests {
    static let dongle = "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\n"

    func parse(_ mqtt: String) throws -> TetherConfig {
        try TetherConfig.parse(Self.dongle + "[mqtt]\n" + mqtt, file: "/etc/tether/tether.toml")
    }

    /// What refuses the config: a parse error, or the one `tether forward`
    /// and `check-config` refuse while `tether run` only warns of it.
    func problem(_ mqtt: String) -> ConfigError? {
        do {
            return try parse(mqtt).mqtt?.cleartextPasswordRefusal
        } catch let error as ConfigError {
            return error
        } catch {
            return nil
        }
    }

    @Test func withoutTheTableThereIsNoForwarding() throws {
        let config = try TetherConfig.parse(Self.dongle, file: "f")
        #expect(config.mqtt == nil)
    }

    @Test func onlyTheURLIsRequiredAndTheDefaultsAreTheIssues() throws {
        let mqtt = try #require(try parse("url = \"mqtt://10.0.0.5\"\n").mqtt)
        #expect(mqtt == MQTTSection(scheme: .mqtt, host: "10.0.0.5"))
        #expect(mqtt.port == 1883)
        #expect(mqtt.topic == "tether/{instance}/{device}/readings")
        #expect(mqtt.statusTopic == "tether/{instance}/status")
        #expect(mqtt.clientID == "tether-{instance}-{hostname}")
        #expect(mqtt.qos == 1 && mqtt.maxInflight == 64 && mqtt.batch == 1 && mqtt.keepalive == .seconds(30))
        #expect(try parse("url = \"mqtts://broker.example.net\"\n").mqtt?.port == 8883)
        let v6 = try #require(try parse("url = \"mqtt://[::1]:1884\"\n").mqtt)
        #expect(v6.host == "::1" && v6.port == 1884)
    }

    @Test func everyKeyIsRead() throws {
        let mqtt = try #require(try parse("""
            url = "mqtts://broker.example.net:8884"
            topic = "fleet/{device}"
            status_topic = "fleet/{instance}/up"
            client_id = "gw-{hostname}"
            qos = 0
            username = "gw17"
            password_file = "/etc/tether/mqtt.password"
            ca_file = "/etc/ssl/certs/ca-certificates.crt"
            cert_file = "/etc/tether/client.crt"
            key_file = "/etc/tether/client.key"
            keepalive = "1m"
            max_inflight = 100
            batch = 50

            """).mqtt)
        #expect(mqtt == MQTTSection(
            scheme: .mqtts, host: "broker.example.net", port: 8884, topic: "fleet/{device}", statusTopic: "fleet/{instance}/up",
            clientID: "gw-{hostname}", qos: 0, username: "gw17", passwordFile: "/etc/tether/mqtt.password",
            caFile: "/etc/ssl/certs/ca-certificates.crt", certFile: "/etc/tether/client.crt", keyFile: "/etc/tether/client.key",
            keepalive: .seconds(60), maxInflight: 100, batch: 50
        ))
    }

    @Test func badValuesNameTheirKeyAndLine() throws {
        let cases: [(String, String)] = [
            ("topic = \"x\"\n", "mqtt"),  // no url
            ("url = \"http://broker\"\n", "mqtt.url"),
            ("url = \"mqtt://\"\n", "mqtt.url"),
            ("url = \"mqtt://broker:0\"\n", "mqtt.url"),
            ("url = \"mqtt://broker/path\"\n", "mqtt.url"),
            ("url = \"mqtt://user@broker\"\n", "mqtt.url"),
            ("url = \"mqtt://broker\"\nqos = 2\n", "mqtt.qos"),
            ("url = \"mqtt://broker\"\ntopic = \"a/#\"\n", "mqtt.topic"),
            ("url = \"mqtt://broker\"\nbatch = 0\n", "mqtt.batch"),
            ("url = \"mqtt://broker\"\nmax_inflight = 0\n", "mqtt.max_inflight"),
            ("url = \"mqtt://broker\"\nkeepalive = \"1s\"\n", "mqtt.keepalive"),
            ("url = \"mqtt://broker\"\npassword_file = \"relative\"\n", "mqtt.password_file"),
            ("url = \"mqtts://broker\"\ncert_file = \"/c\"\n", "mqtt.cert_file"),
            ("url = \"mqtt://broker\"\nca_file = \"/ca\"\n", "mqtt.url"),
            ("url = \"mqtt://broker\"\npassword = \"secret\"\n", "mqtt.password"),
        ]
        for (text, key) in cases {
            let error = try #require(problem(text), "\(text) was accepted")
            #expect(error.key == key, "\(text) gave \(error)")
            #expect(!error.description.contains("secret"), "a secret never reaches a message")
        }
    }

    /// A password over mqtt:// crosses the network in clear text: refused,
    /// at password_file's line, unless the broker is this machine or the
    /// table says allow_cleartext_password = true; mqtts:// is always fine.
    @Test func aPasswordInCleartextToABrokerElsewhereIsAnError() throws {
        let password = "username = \"gw17\"\npassword_file = \"/etc/tether/mqtt.password\"\n"
        for host in ["broker.example.net", "10.0.0.5", "[fd00::5]", "128.0.0.1", "localhost.example.net", "[::2]"] {
            // tether run takes it (it sends nothing to the broker) and warns; the forwarder refuses it.
            #expect(throws: Never.self) { try parse("url = \"mqtt://\(host):1883\"\n" + password) }
            let error = try #require(problem("url = \"mqtt://\(host):1883\"\n" + password), "mqtt://\(host) was accepted")
            #expect(error.key == "mqtt.password_file" && error.line == 7, "\(error)")
            #expect(error.description.hasPrefix("/etc/tether/tether.toml:7: mqtt.password_file: the password would cross the network in clear text"), "\(error)")
            #expect(error.description.contains("mqtts://") && error.description.contains("allow_cleartext_password = true"), "says both ways out: \(error)")
        }
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]"] {
            #expect(problem("url = \"mqtt://\(host):1883\"\n" + password) == nil, "mqtt://\(host) is this machine")
        }
        #expect(problem("url = \"mqtts://broker.example.net\"\n" + password) == nil)
        #expect(problem("url = \"mqtt://broker.example.net\"\nusername = \"gw17\"\n") == nil, "no password, nothing to leak")
        let allowed = try #require(try parse("url = \"mqtt://10.0.0.5\"\n" + password + "allow_cleartext_password = true\n").mqtt)
        #expect(allowed.allowCleartextPassword && allowed.passwordFile == "/etc/tether/mqtt.password")
        #expect(try parse("url = \"mqtt://10.0.0.5\"\n").mqtt?.allowCleartextPassword == false)
        #expect(problem("url = \"mqtt://10.0.0.5\"\n" + password + "allow_cleartext_password = false\n")?.key == "mqtt.password_file")
        #expect(problem("url = \"mqtt://10.0.0.5\"\nallow_cleartext_password = \"yes\"\n")?.key == "mqtt.allow_cleartext_password")
    }

    @Test func loopbackIsLocalhostAnd127Slash8AndColonColon1() {
        #expect(MQTTSection.isLoopback("127.0.0.1") && MQTTSection.isLoopback("127.255.255.254") && MQTTSection.isLoopback("::1"))
        #expect(!MQTTSection.isLoopback("126.0.0.1") && !MQTTSection.isLoopback("10.127.0.1") && !MQTTSection.isLoopback("::"))
        #expect(!MQTTSection.isLoopback("127.example.net") && !MQTTSection.isLoopback("my-localhost"))
    }

    /// The example config (installed as /etc/tether/tether.toml) carries the
    /// [mqtt] and [metrics] tables commented out: uncommented (each from its
    /// `# [table]` line to the next empty line), it must be valid as it stands.
    @Test func theExampleConfigsTablesAreValidWhenUncommented() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/tether.toml")
        let text = try String(contentsOf: example, encoding: .utf8)
        var inTable = false
        var uncommented: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "# [mqtt]" || line == "# [metrics]" || line == "# [decode]" { inTable = true }
            if line.isEmpty { inTable = false }
            uncommented.append(inTable && line.hasPrefix("# ") ? String(line.dropFirst(2)) : String(line))
        }
        #expect(uncommented.contains("[mqtt]") && uncommented.contains("[metrics]"), "config/tether.toml has both tables, commented")
        let config = try TetherConfig.parse(uncommented.joined(separator: "\n"), file: example.path)
        let mqtt = try #require(config.mqtt)
        #expect(mqtt.scheme == .mqtts && mqtt.host == "broker.example.net" && mqtt.port == 8883)
        #expect(mqtt.passwordFile == "/etc/tether/mqtt.password" && mqtt.certFile == nil && mqtt.keyFile == nil)
        #expect(config.metrics.textfile == "/var/lib/prometheus/node-exporter/tether.prom")
        #expect(config.metrics.forwardTextfile == "/var/lib/prometheus/node-exporter/tether-forward.prom")
        #expect(config.decode?.size == 8, "the simulated dongle's payload: \(String(describing: config.decode))")
    }
}
