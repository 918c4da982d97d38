import Configuration
import DurableFile
import MQTT
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension Forwarder.Settings {
    /// The settings `tether forward` runs with: the config's [mqtt] table,
    /// its templates filled in, the password read from its file (never kept
    /// anywhere else), the cursor in `stateDirectory`.
    public init(
        config: TetherConfig, mqtt: MQTTSection, instance: InstanceName, hostname: String, stateDirectory: String
    ) throws(Forwarder.StartFailure) {
        func fill(_ template: String) -> String {
            template.replacing("{instance}", with: instance.description).replacing("{hostname}", with: hostname)
        }
        var password: String?
        if let file = mqtt.passwordFile {
            password = try Self.readSecret(file)
        }
        let tls = mqtt.scheme == .mqtts
            ? MQTTClient.TLS(caFile: mqtt.caFile ?? "/etc/ssl/certs/ca-certificates.crt", certFile: mqtt.certFile, keyFile: mqtt.keyFile)
            : nil
        if let tls {
            // libmosquitto only says "invalid arguments" for a file it cannot open.
            for (setting, file) in [("ca_file", tls.caFile), ("cert_file", tls.certFile), ("key_file", tls.keyFile)] {
                guard let file, access(file, R_OK) != 0 else { continue }
                throw Forwarder.StartFailure(description: "\(file): cannot read mqtt.\(setting): \(String(cString: strerror(errno)))")
            }
        }
        let options = MQTTClient.Options(
            host: mqtt.host, port: mqtt.port, clientID: fill(mqtt.clientID), username: mqtt.username, password: password,
            keepalive: mqtt.keepalive, maxInflight: mqtt.maxInflight, tls: tls
        )
        self.init(
            readingsDirectory: config.readings.directory, cursor: ForwardCursor(stateDirectory: stateDirectory, instance: instance),
            client: options, topic: fill(mqtt.topic), statusTopic: fill(mqtt.statusTopic), qos: Int32(mqtt.qos),
            batch: mqtt.batch, statusFile: ForwarderStatusFile(stateDirectory: stateDirectory, instance: instance)
        )
        durableSyncInterval = config.readings.flushInterval
        decode = config.decode
    }

    /// The first line of a secret's file, which must be a regular file that
    /// no one but its owner and the forwarder's groups may read
    /// (`SecretFilePermissions`).
    static func readSecret(_ path: String, groups: Set<gid_t> = SecretFilePermissions.processGroups()) throws(Forwarder.StartFailure) -> String {
        let read: (bytes: [UInt8], status: stat)
        do throws(SmallFile.Failure) {
            // A missing file is an error here, unlike for the cursor.
            guard let got = try SmallFile.readWithStatus(path, limit: 4096) else {
                throw SmallFile.Failure(operation: "read \(path)", code: ENOENT)
            }
            read = got
        } catch {
            throw Forwarder.StartFailure(description: "\(path): cannot read mqtt.password_file: \(error.reason)")
        }
        guard read.status.st_mode & S_IFMT == S_IFREG else {
            throw Forwarder.StartFailure(description: "\(path): mqtt.password_file is not a regular file")
        }
        if let problem = SecretFilePermissions.problem(
            mode: read.status.st_mode, group: read.status.st_gid, groups: groups, setting: "mqtt.password_file"
        ) {
            throw Forwarder.StartFailure(description: "\(path): \(problem)")
        }
        let bytes = read.bytes
        let text = String(decoding: bytes, as: UTF8.self)
        return String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }

    /// This machine's host name, for `{hostname}`.
    public static var hostname: String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let ok = buffer.withUnsafeMutableBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in chars.baseAddress.map { gethostname($0, chars.count) == 0 } ?? false }
        }
        guard ok else { return "unknown" }
        return String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
    }
}
