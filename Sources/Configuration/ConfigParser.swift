import Hex
import LinkPolicy
import TOMLKit

extension TetherConfig {
    /// Parses and validates a configuration. `file` is only used in error messages;
    /// `instance` chooses the defaults that differ between daemons (the readings directory).
    /// Every problem, whatever the input, is reported as a thrown `ConfigError`.
    public static func parse(_ text: String, file: String, instance: InstanceName = .default) throws(ConfigError) -> TetherConfig {
        let context = ConfigContext(file: file, locator: KeyLocator(source: text))
        let root = try parseTOML(text, context: context)
        try rejectUnknownTables(root, context: context)
        func section(_ name: String) throws(ConfigError) -> ConfigSection {
            guard let value = root[name] else { return ConfigSection(name: name, table: nil, context: context) }
            guard let table = value.table else {
                throw context.error(name, "expected a table [\(name)], got \(ConfigContext.describe(value.type))")
            }
            return ConfigSection(name: name, table: table, context: context)
        }
        var config = TetherConfig(
            bluez: try parseBlueZ(section("bluez")),
            dongle: try parseDongle(section("dongle")),
            keepalive: try parseKeepAlive(section("keepalive")),
            reconnect: try parseReconnect(section("reconnect")),
            readings: try parseReadings(section("readings"), instance: instance),
            mqtt: try parseMQTT(section("mqtt")),
            metrics: try parseMetrics(section("metrics"))
        )
        config.decode = try parseDecode(section("decode"))
        try config.validate(context: context)
        config.notes.warnings = config.warnings(context: context)
        if case .passkey(let source) = config.dongle.pairing {
            let key = source == .credential ? "dongle.pairing" : "dongle.passkey_file"
            config.notes.passkeyLocation = (file, context.locator.line(of: key), key)
        }
        return config
    }

    private static let tableNames = Set(ConfigKeys.tables.keys)

    private static func parseTOML(_ text: String, context: ConfigContext) throws(ConfigError) -> TOMLTable {
        // TOMLKit hands the text to C++ as a C string, which would silently end at a NUL.
        if let nul = text.utf8.firstIndex(of: 0) {
            let line = text.utf8[..<nul].reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
            throw ConfigError(file: context.file, line: line, message: "contains a NUL byte")
        }
        if let problem = TOMLPrescreen.check(text) {
            throw ConfigError(file: context.file, line: problem.line, message: "TOML syntax error: \(problem.message)")
        }
        do {
            return try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            let line = error.source.begin.line
            throw ConfigError(file: context.file, line: line > 0 ? line : nil, message: "TOML syntax error: \(error.description)")
        } catch {
            throw ConfigError(file: context.file, message: "TOML syntax error: \(error)")
        }
    }

    private static func rejectUnknownTables(_ root: TOMLTable, context: ConfigContext) throws(ConfigError) {
        let unknown = root.keys.filter { !tableNames.contains($0) }
        guard let first = unknown.min(by: { (context.locator.line(of: $0) ?? .max) < (context.locator.line(of: $1) ?? .max) })
        else { return }
        let known = tableNames.sorted().map { "[\($0)]" }.joined(separator: ", ")
        if root[first]?.type == .table {
            throw context.error(first, "unknown table [\(first)] (known tables: \(known))")
        }
        throw context.error(first, "unknown key; settings belong in one of the tables \(known)")
    }

    private static func parseBlueZ(_ section: ConfigSection) throws(ConfigError) -> BlueZSection {
        try section.rejectUnknownKeys(ConfigKeys.bluez)
        var result = BlueZSection()
        if let adapter = try section.string("adapter") {
            if adapter.contains(":") {
                guard let address = BluetoothAddressText.normalize(adapter) else {
                    throw section.error("adapter", "expected a controller address such as \"00:1A:7D:DA:71:13\" or a name such as \"hci0\", got \(ConfigContext.quoted(adapter))")
                }
                result.adapterAddress = address
                return result
            }
            // The name becomes part of a D-Bus object path (/org/bluez/hci0).
            guard !adapter.isEmpty, adapter.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
                throw section.error("adapter", "expected an adapter name such as \"hci0\" or a controller address such as \"00:1A:7D:DA:71:13\", got \(ConfigContext.quoted(adapter))")
            }
            result.adapter = adapter
        }
        return result
    }

    private static func parseDongle(_ section: ConfigSection) throws(ConfigError) -> DongleSection {
        try section.rejectUnknownKeys(ConfigKeys.dongle)
        var result = DongleSection()
        if let text = try section.string("address") {
            guard let address = BluetoothAddressText.normalize(text) else {
                throw section.error("address", "expected an address such as \"AA:BB:CC:DD:EE:FF\", got \(ConfigContext.quoted(text))")
            }
            result.address = address
        }
        if let prefix = try section.string("name_prefix") {
            guard !prefix.isEmpty else { throw section.error("name_prefix", "must not be empty (it would match every device)") }
            result.namePrefix = prefix
        }
        result.serviceUUID = try section.uuid("service_uuid")
        if let notify = try section.stringArray("notify") {
            guard !notify.isEmpty else { throw section.error("notify", "must list at least one characteristic") }
            var uuids: [String] = []
            for text in notify {
                let uuid = try section.normalizedUUID(text, key: "notify")
                guard !uuids.contains(uuid) else { throw section.error("notify", "\(uuid) is listed twice") }
                uuids.append(uuid)
            }
            result.notify = uuids
        }
        if let text = try section.string("notify_path") {
            guard let path = NotifyPath(rawValue: text) else {
                let choices = NotifyPath.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                throw section.error("notify_path", "expected one of \(choices), got \(ConfigContext.quoted(text))")
            }
            result.notifyPath = path
        }
        if let text = try section.string("silence_limit") {
            if text == "off" {
                result.silenceLimit = .off
            } else {
                guard let limit = try section.duration("silence_limit") else { return result }
                guard limit > .zero else {
                    throw section.error("silence_limit", "must be greater than 0s, or \"off\" to never judge silence")
                }
                result.silenceLimit = .after(limit)
            }
        }
        result.pairing = try parsePairing(section, address: result.address)
        guard result.address != nil || result.namePrefix != nil || result.serviceUUID != nil else {
            throw section.context.error("dongle", "identify the dongle with address, name_prefix and/or service_uuid")
        }
        return result
    }

    private static func parseKeepAlive(_ section: ConfigSection) throws(ConfigError) -> KeepAliveSection {
        try section.rejectUnknownKeys(ConfigKeys.keepalive)
        var result = KeepAliveSection()
        result.enabled = try section.bool("enabled") ?? result.enabled
        result.interval = try section.duration("interval") ?? result.interval
        result.characteristic = try section.uuid("characteristic") ?? result.characteristic
        if let text = try section.string("write") {
            // An empty value is the documented way to ask for read polling.
            if text.isEmpty {
                result.write = nil
            } else {
                guard let bytes = HexBytes.decode(text) else {
                    throw section.error("write", "expected hex bytes such as \"00\" or \"a1b2\", got \(ConfigContext.quoted(text))")
                }
                // ATT caps an attribute value at 512 bytes; longer writes can never succeed.
                guard bytes.count <= 512 else { throw section.error("write", "is \(bytes.count) bytes; at most 512 can be written") }
                result.write = bytes
            }
        }
        if let text = try section.string("write_type") {
            guard let type = WriteType(rawValue: text) else {
                throw section.error("write_type", "expected \"command\" or \"request\", got \(ConfigContext.quoted(text))")
            }
            result.writeType = type
        }
        result.timeout = try section.duration("timeout") ?? result.timeout
        result.sleepAfter = try section.duration("sleep_after") ?? result.sleepAfter
        result.confirmEvery = try section.duration("confirm_every") ?? result.confirmEvery
        return result
    }

    private static func parseReconnect(_ section: ConfigSection) throws(ConfigError) -> ReconnectSection {
        try section.rejectUnknownKeys(ConfigKeys.reconnect)
        var result = ReconnectSection()
        result.firstDelay = try section.duration("first_delay") ?? result.firstDelay
        result.initialBackoff = try section.duration("initial_backoff") ?? result.initialBackoff
        result.maxBackoff = try section.duration("max_backoff") ?? result.maxBackoff
        result.jitter = try section.double("jitter") ?? result.jitter
        result.connectTimeout = try section.duration("connect_timeout") ?? result.connectTimeout
        result.window = try section.duration("window") ?? result.window
        result.windowAttempts = try section.int("window_attempts") ?? result.windowAttempts
        result.cooldown = try section.duration("cooldown") ?? result.cooldown
        result.scanStallAfter = try section.duration("scan_stall_after") ?? result.scanStallAfter
        if let unit = try section.string("uart_unit") {
            guard UnitName.isService(unit) else {
                throw section.error("uart_unit", "expected a systemd service's name, such as \"hciuart.service\", got \(ConfigContext.quoted(unit))")
            }
            result.uartUnit = unit
        }
        if let text = try section.string("remove_stale_device") {
            guard let choice = StaleDeviceRemoval(rawValue: text) else {
                let choices = StaleDeviceRemoval.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                throw section.error("remove_stale_device", "expected one of \(choices), got \(ConfigContext.quoted(text))")
            }
            result.removeStaleDevice = choice
        }
        if let names = try section.stringArray("escalate") {
            var steps: [EscalationStep] = []
            for name in names {
                guard let step = EscalationStep(rawValue: name) else {
                    let choices = EscalationStep.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                    throw section.error("escalate", "expected one of \(choices), got \(ConfigContext.quoted(name))")
                }
                guard !steps.contains(step) else { throw section.error("escalate", "\"\(name)\" is listed twice") }
                steps.append(step)
            }
            result.escalate = steps
        }
        return result
    }

    private static func parseReadings(_ section: ConfigSection, instance: InstanceName) throws(ConfigError) -> ReadingsSection {
        try section.rejectUnknownKeys(ConfigKeys.readings)
        var result = ReadingsSection(directory: instance.defaultReadingsDirectory)
        if let directory = try section.string("directory") {
            // The daemon runs with cwd "/", so a relative path would surprise.
            guard directory.hasPrefix("/") else {
                throw section.error("directory", "must be an absolute path, got \(ConfigContext.quoted(directory))")
            }
            result.directory = directory
        }
        result.flushInterval = try section.duration("flush_interval") ?? result.flushInterval
        result.rotateSize = try section.byteSize("rotate_size") ?? result.rotateSize
        result.retainSize = try section.byteSize("retain_size") ?? result.retainSize
        result.maxBacklog = try section.int("max_backlog") ?? result.maxBacklog
        return result
    }
}
