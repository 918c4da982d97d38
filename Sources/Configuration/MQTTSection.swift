#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `[mqtt]`: where `tether forward` delivers the readings. `tether run`
/// ignores it; `tether forward` needs it (its `url` at least).
public struct MQTTSection: Sendable, Equatable {
    public enum Scheme: String, Sendable {
        case mqtt, mqtts
        public var defaultPort: Int { self == .mqtt ? 1883 : 8883 }
    }

    public var scheme: Scheme
    public var host: String
    public var port: Int
    /// With `{instance}`, `{device}` (the record's dongle address) and `{hostname}`.
    public var topic: String
    public var statusTopic: String
    public var clientID: String
    /// 0 or 1.
    public var qos: Int
    public var username: String?
    /// The password is read from this file when the forwarder starts; it is
    /// never in the config, the command line or the logs.
    public var passwordFile: String?
    public var caFile: String?
    public var certFile: String?
    public var keyFile: String?
    public var keepalive: Duration
    public var maxInflight: Int
    /// Records per message (joined by newlines).
    public var batch: Int
    /// `allow_cleartext_password`: a `password_file` may go over `mqtt://`
    /// (no TLS) to a broker that is not on this machine. Off by default: the
    /// password would cross the network in clear text.
    public var allowCleartextPassword: Bool
    /// The `password_file` would go over `mqtt://` to another machine and
    /// `allow_cleartext_password` is off: `tether forward` and `check-config`
    /// refuse the config with this error; `tether run`, which sends nothing
    /// to the broker, only warns, so that the dongle is not left to fall
    /// asleep for a setting of the forwarder's.
    public var cleartextPasswordRefusal: ConfigError?

    public init(
        scheme: Scheme, host: String, port: Int? = nil, topic: String = "tether/{instance}/{device}/readings",
        statusTopic: String = "tether/{instance}/status", clientID: String = "tether-{instance}-{hostname}", qos: Int = 1,
        username: String? = nil, passwordFile: String? = nil, caFile: String? = nil, certFile: String? = nil,
        keyFile: String? = nil, keepalive: Duration = .seconds(30), maxInflight: Int = 64, batch: Int = 1,
        allowCleartextPassword: Bool = false
    ) {
        self.scheme = scheme
        self.host = host
        self.port = port ?? scheme.defaultPort
        self.topic = topic
        self.statusTopic = statusTopic
        self.clientID = clientID
        self.qos = qos
        self.username = username
        self.passwordFile = passwordFile
        self.caFile = caFile
        self.certFile = certFile
        self.keyFile = keyFile
        self.keepalive = keepalive
        self.maxInflight = maxInflight
        self.batch = batch
        self.allowCleartextPassword = allowCleartextPassword
    }

    /// Whether `host` (as `parseURL` gives it) is this machine's loopback:
    /// `localhost`, 127.0.0.0/8, `::1` (in any spelling, and 127.0.0.0/8
    /// mapped into IPv6). Only there does `mqtt://` keep a password off the
    /// network.
    public static func isLoopback(_ host: String) -> Bool {
        let name = host.lowercased()
        if name == "localhost" || name == "localhost." { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        // ::ffff:127.x.y.z
        return bytes[..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
    }

    /// `mqtt://host[:port]` or `mqtts://host[:port]` (an IPv6 address in
    /// brackets); nil with the reason otherwise.
    static func parseURL(_ text: String) -> Result<(Scheme, String, Int?), URLProblem> {
        guard let separator = text.firstRange(of: "://") else { return .failure(URLProblem("expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")) }
        guard let scheme = Scheme(rawValue: String(text[..<separator.lowerBound]).lowercased()) else {
            return .failure(URLProblem("the scheme must be mqtt or mqtts"))
        }
        var rest = Substring(text[separator.upperBound...])
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains("@"), !rest.contains("?") else {
            return .failure(URLProblem("expected only a host and a port after \(scheme.rawValue)://"))
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(URLProblem("an IPv6 address needs its closing ]")) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(URLProblem("unexpected text after the address")) }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-:_".contains($0)) }) else {
            return .failure(URLProblem("the host is not a name or address"))
        }
        var port: Int?
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                return .failure(URLProblem("the port must be a number from 1 to 65535"))
            }
            port = value
        }
        return .success((scheme, String(host), port))
    }

    struct URLProblem: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }
}

extension TetherConfig {
    static func parseMQTT(_ section: ConfigSection) throws(ConfigError) -> MQTTSection? {
        guard section.table != nil else { return nil }
        try section.rejectUnknownKeys(ConfigKeys.mqtt)
        guard let url = try section.string("url") else { throw section.context.error("mqtt", "url is required, e.g. url = \"mqtts://broker.example.net:8883\"") }
        let (scheme, host, port): (MQTTSection.Scheme, String, Int?)
        switch MQTTSection.parseURL(url) {
        case .success(let parts): (scheme, host, port) = parts
        case .failure(let problem): throw section.error("url", "\(problem.message), got \(ConfigContext.quoted(url))")
        }
        var result = MQTTSection(scheme: scheme, host: host, port: port)
        for (key, keyPath) in [("topic", \MQTTSection.topic), ("status_topic", \.statusTopic), ("client_id", \.clientID)] {
            guard let text = try section.string(key) else { continue }
            guard !text.isEmpty, !text.contains("#"), !text.contains("+") || key == "client_id" else {
                throw section.error(key, "must not be empty nor hold the wildcards # and +, got \(ConfigContext.quoted(text))")
            }
            result[keyPath: keyPath] = text
        }
        if let qos = try section.int("qos") {
            guard qos == 0 || qos == 1 else { throw section.error("qos", "must be 0 or 1, got \(qos)") }
            result.qos = qos
        }
        result.username = try section.string("username").flatMap { $0.isEmpty ? nil : $0 }
        for (key, keyPath) in [("password_file", \MQTTSection.passwordFile), ("ca_file", \.caFile), ("cert_file", \.certFile), ("key_file", \.keyFile)] {
            guard let path = try section.string(key), !path.isEmpty else { continue }
            guard path.hasPrefix("/") else { throw section.error(key, "must be an absolute path, got \(ConfigContext.quoted(path))") }
            result[keyPath: keyPath] = path
        }
        result.allowCleartextPassword = try section.bool("allow_cleartext_password") ?? false
        if scheme == .mqtt, result.passwordFile != nil, !result.allowCleartextPassword, !MQTTSection.isLoopback(host) {
            result.cleartextPasswordRefusal = section.error(
                "password_file",
                "the password would cross the network in clear text: url is mqtt:// (no TLS) to \(host), which is not this machine; "
                    + "use mqtts:// (the broker's TLS port, usually 8883), or, only on a network you trust, set allow_cleartext_password = true"
            )
        }
        if (result.certFile == nil) != (result.keyFile == nil) {
            throw section.error(result.certFile == nil ? "key_file" : "cert_file", "cert_file and key_file go together (mutual TLS)")
        }
        if scheme == .mqtt, result.caFile != nil || result.certFile != nil {
            throw section.error("url", "ca_file, cert_file and key_file need TLS: use mqtts://")
        }
        if let keepalive = try section.duration("keepalive") {
            guard keepalive >= .seconds(5), keepalive <= .seconds(65535) else {
                throw section.error("keepalive", "must be from 5s to 65535s")
            }
            result.keepalive = keepalive
        }
        if let inflight = try section.int("max_inflight") {
            guard (1...65535).contains(inflight) else { throw section.error("max_inflight", "must be from 1 to 65535, got \(inflight)") }
            result.maxInflight = inflight
        }
        if let batch = try section.int("batch") {
            guard (1...10_000).contains(batch) else { throw section.error("batch", "must be from 1 to 10000, got \(batch)") }
            result.batch = batch
        }
        return result
    }
}
