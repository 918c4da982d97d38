import Configuration
import FuzzSupport
import LinkPolicy

// Config file text → TetherConfig.parse, the daemon's parser (TetherConfig.load
// reads the file, refuses invalid UTF-8, and calls it). parse promises a
// ConfigError for every problem whatever the String, so bytes that are not
// UTF-8 are fed to it lossily decoded rather than thrown away.
//
// Refused: the error names the file, a line inside the text (or none), and says
// something, on one line without control characters. Accepted: the config
// meets the invariants the daemon relies on, writing it back out as TOML and
// parsing that gives the same config, and the reconnect policy it carries
// computes sane delays.

let file = "/etc/tether/fuzz.toml"

@main
enum Main {
    static func main() { runLibFuzzer(testOneInput) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: inputBytes(data, size), as: UTF8.self)
    do {
        let config = try TetherConfig.parse(text, file: file)
        checkAccepted(config, text: text)
    } catch {
        checkRefused(error, text: text)
    }
    return 0
}

func checkRefused(_ error: ConfigError, text: String) {
    let lines = text.utf8.reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
    require(error.file == file, "the error names \(error.file)")
    if let line = error.line { require(line >= 1 && line <= lines, "error line \(line) of a \(lines)-line text: \(error)") }
    require(!error.message.isEmpty, "an error without a message")
    require(error.description.hasPrefix(file + (error.line.map { ":\($0)" } ?? "") + ": "), "badly formed: \(error)")
    // Errors go to the terminal and the journal, one line each.
    require(!error.description.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7f },
            "a control character in the error: \(error.description.debugDescription)")
}

func checkAccepted(_ config: TetherConfig, text: String) {
    let dongle = config.dongle
    require(dongle.address != nil || dongle.namePrefix != nil || dongle.serviceUUID != nil, "no way to find the dongle")
    if let address = dongle.address { require(BluetoothAddressText.normalize(address) == address, "address \(address) not normalised") }
    if let prefix = dongle.namePrefix { require(!prefix.isEmpty, "empty name prefix") }
    if let uuid = dongle.serviceUUID { require(ConfigUUID.normalize(uuid) == uuid, "service UUID \(uuid) not normalised") }
    require(!dongle.notify.isEmpty && Set(dongle.notify).count == dongle.notify.count, "notify \(dongle.notify)")
    require(dongle.notify.allSatisfy { ConfigUUID.normalize($0) == $0 }, "notify UUIDs not normalised: \(dongle.notify)")
    if let adapter = config.bluez.adapter {
        require(!adapter.isEmpty && adapter.utf8.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "_") }, "adapter \(adapter)")
    }
    let k = config.keepalive
    require(k.interval > .zero && k.timeout > .zero && k.timeout <= k.interval && k.interval <= k.sleepAfter / 2, "keepalive timing \(k)")
    require(ConfigUUID.normalize(k.characteristic) == k.characteristic, "keepalive characteristic \(k.characteristic)")
    require((k.write?.count ?? 0) <= 512, "a keep-alive write of \(k.write?.count ?? 0) bytes")
    require(config.readings.directory.hasPrefix("/"), "relative readings directory")
    require(config.readings.rotateSize >= 4096 && config.readings.retainSize >= config.readings.rotateSize, "readings sizes")
    require(config.readings.maxBacklog >= 1 && config.readings.flushInterval > .zero, "readings backlog/flush")
    require(Set(config.reconnect.escalate.map(\.rawValue)).count == config.reconnect.escalate.count, "escalation steps repeat")

    let rendered = render(config)
    do {
        let again = try TetherConfig.parse(rendered, file: file)
        require(again == config, "the config changed when written out and parsed again:\n\(rendered)")
    } catch {
        require(false, "the config written out does not parse: \(error)\n\(rendered)")
    }

    checkPolicy(config.reconnect.policy)
    for duration in [k.interval, k.timeout, k.sleepAfter, config.reconnect.cooldown, config.reconnect.window] {
        _ = DurationText.rounded(duration)
    }
}

/// Delays from the policy a config carries: attempt 1 after `firstDelay`, then
/// non-decreasing backoffs capped at `maxBackoff`, each jittered by at most ±jitter.
func checkPolicy(_ policy: ReconnectPolicy) {
    require(policy.baseDelay(beforeAttempt: 1) == policy.firstDelay, "first attempt not after firstDelay")
    var previous = Duration.zero
    for attempt in 2...(min(policy.windowAttempts, 80) + 1) {
        let base = policy.baseDelay(beforeAttempt: attempt)
        require(base >= previous && base <= max(policy.maxBackoff, policy.initialBackoff), "base delay \(base) before attempt \(attempt)")
        require(attempt > 2 || base == min(policy.initialBackoff, policy.maxBackoff), "second attempt not after initialBackoff")
        previous = base
        let seconds = Double(base.components.seconds) + Double(base.components.attoseconds) * 1e-18
        for unit in [0, 0.5, 0.999_999_999] {
            let delay = policy.delay(beforeAttempt: attempt, unit: unit)
            let actual = Double(delay.components.seconds) + Double(delay.components.attoseconds) * 1e-18
            let slack = seconds * 1e-9 + 1e-9
            require(actual >= seconds * (1 - policy.jitter) - slack && actual <= seconds * (1 + policy.jitter) + slack,
                    "delay \(delay) before attempt \(attempt) is outside \(base) ± \(policy.jitter)")
        }
    }
}

func isAlphanumeric(_ byte: UInt8) -> Bool {
    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
}

// MARK: - Writing a config out

/// The config as a TOML file, every key spelled out.
func render(_ config: TetherConfig) -> String {
    var lines = ["[bluez]"]
    if let adapter = config.bluez.adapter { lines.append("adapter = \(quoted(adapter))") }
    if let address = config.bluez.adapterAddress { lines.append("adapter = \(quoted(address))") }
    lines.append("[dongle]")
    if let address = config.dongle.address { lines.append("address = \(quoted(address))") }
    if let prefix = config.dongle.namePrefix { lines.append("name_prefix = \(quoted(prefix))") }
    if let uuid = config.dongle.serviceUUID { lines.append("service_uuid = \(quoted(uuid))") }
    lines.append("notify = [\(config.dongle.notify.map(quoted).joined(separator: ", "))]")
    lines.append("notify_path = \(quoted(config.dongle.notifyPath.rawValue))")
    switch config.dongle.silenceLimit {
    case .automatic: break
    case .off: lines.append("silence_limit = \"off\"")
    case .after(let limit): lines.append("silence_limit = \(duration(limit))")
    }
    let k = config.keepalive
    lines += [
        "[keepalive]",
        "enabled = \(k.enabled)",
        "interval = \(duration(k.interval))",
        "characteristic = \(quoted(k.characteristic))",
        "write = \(quoted(k.write.map(hex) ?? ""))",
        "write_type = \(quoted(k.writeType.rawValue))",
        "timeout = \(duration(k.timeout))",
        "sleep_after = \(duration(k.sleepAfter))",
    ]
    let r = config.reconnect
    lines += [
        "[reconnect]",
        "remove_stale_device = \(quoted(r.removeStaleDevice.rawValue))",
        "first_delay = \(duration(r.firstDelay))",
        "initial_backoff = \(duration(r.initialBackoff))",
        "max_backoff = \(duration(r.maxBackoff))",
        "jitter = \(r.jitter)",
        "connect_timeout = \(duration(r.connectTimeout))",
        "window = \(duration(r.window))",
        "window_attempts = \(r.windowAttempts)",
        "cooldown = \(duration(r.cooldown))",
        "escalate = [\(r.escalate.map { quoted($0.rawValue) }.joined(separator: ", "))]",
    ]
    let s = config.readings
    lines += [
        "[readings]",
        "directory = \(quoted(s.directory))",
        "flush_interval = \(duration(s.flushInterval))",
        "rotate_size = \(s.rotateSize)",
        "retain_size = \(quoted(ByteSizeText.format(s.retainSize)))",
        "max_backlog = \(s.maxBacklog)",
    ]
    if let m = config.mqtt {
        let host = m.host.contains(":") ? "[\(m.host)]" : m.host
        lines += [
            "[mqtt]",
            "url = \(quoted("\(m.scheme.rawValue)://\(host):\(m.port)"))",
            "topic = \(quoted(m.topic))",
            "status_topic = \(quoted(m.statusTopic))",
            "client_id = \(quoted(m.clientID))",
            "qos = \(m.qos)",
            "keepalive = \(duration(m.keepalive))",
            "max_inflight = \(m.maxInflight)",
            "batch = \(m.batch)",
        ]
        for (key, value) in [("username", m.username), ("password_file", m.passwordFile), ("ca_file", m.caFile),
                             ("cert_file", m.certFile), ("key_file", m.keyFile)] {
            if let value { lines.append("\(key) = \(quoted(value))") }
        }
    }
    let metrics = config.metrics
    lines += ["[metrics]", "interval = \(duration(metrics.interval))"]
    if let textfile = metrics.textfile { lines.append("textfile = \(quoted(textfile))") }
    if let textfile = metrics.forwardTextfile { lines.append("forward_textfile = \(quoted(textfile))") }
    return lines.joined(separator: "\n") + "\n"
}

func duration(_ value: Duration) -> String { quoted(DurationText.format(value)) }

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
}

/// A TOML basic string.
func quoted(_ text: String) -> String {
    var result = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": result += "\\\""
        case "\\": result += "\\\\"
        case _ where scalar.value < 0x20 || scalar.value == 0x7f:
            let code = String(scalar.value, radix: 16)
            result += "\\u" + String(repeating: "0", count: 4 - code.count) + code
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result + "\""
}
