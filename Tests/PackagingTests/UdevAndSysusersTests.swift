import Foundation
import TestSupport
import Testing

/// A udev rule, parsed as udev reads it: comma-separated `KEY{attr}OP"value"`.
struct UdevRule {
    struct Pair: Equatable {
        var key: String
        var attribute: String?
        var op: String
        var value: String
        var isMatch: Bool { op == "==" || op == "!=" }
    }

    enum ParseError: Error, CustomStringConvertible {
        case malformed(String)
        case wrongOperator(String)
        case unknownKey(String)
        case incomplete(String)
        var description: String {
            switch self {
            case .malformed(let text): "not KEY{attr}OP\"value\": \(text)"
            case .wrongOperator(let text): "operator not allowed for this key: \(text)"
            case .unknownKey(let text): "unknown key: \(text)"
            case .incomplete(let text): "a rule needs a match and an assignment: \(text)"
            }
        }
    }

    var pairs: [Pair]

    /// Keys that only match, only assign, or do both (udev(7)).
    static let matchOnly: Set<String> = [
        "ACTION", "DEVPATH", "KERNEL", "KERNELS", "SUBSYSTEM", "SUBSYSTEMS", "DRIVER", "DRIVERS",
        "ATTRS", "TAGS", "TEST", "PROGRAM", "RESULT", "CONST",
    ]
    static let assignOnly: Set<String> = [
        "OWNER", "GROUP", "MODE", "SECLABEL", "RUN", "LABEL", "GOTO", "IMPORT", "OPTIONS",
    ]
    static let both: Set<String> = ["ATTR", "SYSCTL", "ENV", "TAG", "NAME", "SYMLINK"]
    static let needsAttribute: Set<String> = ["ATTR", "ATTRS", "SYSCTL", "ENV", "CONST", "SECLABEL"]
    static let mayHaveAttribute: Set<String> = ["TEST", "RUN", "IMPORT"]

    init(_ line: String) throws {
        var pairs: [Pair] = []
        var rest = Substring(line)
        while !rest.isEmpty {
            rest = rest.drop { $0 == " " || $0 == "\t" }
            let key = rest.prefix { $0.isUppercase || $0 == "_" }
            guard !key.isEmpty else { throw ParseError.malformed(String(rest)) }
            rest = rest.dropFirst(key.count)
            var attribute: String?
            if rest.first == "{" {
                guard let close = rest.firstIndex(of: "}") else { throw ParseError.malformed(String(rest)) }
                attribute = String(rest[rest.index(after: rest.startIndex)..<close])
                rest = rest[rest.index(after: close)...]
            }
            rest = rest.drop { $0 == " " }
            guard let op = ["==", "!=", "+=", "-=", ":=", "="].first(where: { rest.hasPrefix($0) }) else {
                throw ParseError.malformed(String(rest))
            }
            rest = rest.dropFirst(op.count).drop { $0 == " " }
            guard rest.first == "\"", let end = rest.dropFirst().firstIndex(of: "\"") else {
                throw ParseError.malformed(String(rest))
            }
            let value = String(rest[rest.index(after: rest.startIndex)..<end])
            rest = rest[rest.index(after: end)...].drop { $0 == " " }
            if rest.first == "," { rest = rest.dropFirst() } else if !rest.isEmpty { throw ParseError.malformed(String(rest)) }

            let name = String(key)
            let pair = Pair(key: name, attribute: attribute, op: op, value: value)
            guard Self.matchOnly.contains(name) || Self.assignOnly.contains(name) || Self.both.contains(name) else {
                throw ParseError.unknownKey(name)
            }
            if Self.matchOnly.contains(name) && !pair.isMatch { throw ParseError.wrongOperator(line) }
            if Self.assignOnly.contains(name) && pair.isMatch { throw ParseError.wrongOperator(line) }
            if Self.needsAttribute.contains(name) && attribute == nil {
                throw ParseError.malformed("\(name) needs {attribute}")
            }
            if let attribute, !Self.needsAttribute.contains(name) && !Self.mayHaveAttribute.contains(name) {
                throw ParseError.malformed("\(name) takes no {\(attribute)}")
            }
            pairs.append(pair)
        }
        guard pairs.contains(where: \.isMatch), pairs.contains(where: { !$0.isMatch }) else {
            throw ParseError.incomplete(line)
        }
        self.pairs = pairs
    }

    func matches(_ key: String, _ attribute: String? = nil) -> String? {
        pairs.first { $0.key == key && $0.attribute == attribute && $0.isMatch }?.value
    }

    func assigns(_ key: String, _ attribute: String? = nil) -> Pair? {
        pairs.first { $0.key == key && $0.attribute == attribute && !$0.isMatch }
    }

    /// The rule lines of a rules file (comments and blank lines dropped,
    /// backslash continuations joined).
    static func lines(of text: String) -> [String] {
        var lines: [String] = []
        var pending = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = String(raw)
            if line.hasSuffix("\\") {
                line.removeLast()
                pending += line
                continue
            }
            line = pending + line
            pending = ""
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            lines.append(trimmed)
        }
        return lines
    }
}

@Suite(.serialized) struct UdevAndSysusersTests {
    static let rulesPath = Packaging.path("udev/70-tether.rules")

    @Test func everyRuleLineParses() throws {
        let lines = UdevRule.lines(of: try Packaging.read(Self.rulesPath))
        #expect(lines.count == 6)
        for line in lines {
            #expect(throws: Never.self, "\(line)") { try UdevRule(line) }
        }
    }

    /// The parser can fail: a match written as an assignment, an unknown key.
    @Test func theParserRejectsBrokenRules() {
        #expect(throws: UdevRule.ParseError.self) { try UdevRule(#"SUBSYSTEM="bluetooth", TAG+="systemd""#) }
        #expect(throws: UdevRule.ParseError.self) { try UdevRule(#"SUBSYSTEM=="bluetooth", TAGG+="systemd""#) }
        #expect(throws: UdevRule.ParseError.self) { try UdevRule(#"SUBSYSTEM=="bluetooth", TAG+="systemd"#) }
        #expect(throws: UdevRule.ParseError.self) { try UdevRule(#"SUBSYSTEM=="bluetooth""#) }
    }

    @Test func aNewControllerWantsTetherService() throws {
        let rules = try UdevRule.lines(of: Packaging.read(Self.rulesPath)).map(UdevRule.init)
        let rule = try #require(rules.first { $0.matches("SUBSYSTEM") == "bluetooth" })
        #expect(rule.matches("ENV", "DEVTYPE") == "host", "connections (hci0:N) must not become device units")
        #expect(rule.matches("ACTION") == nil, "TAG+=\"systemd\" must not depend on the action")
        #expect(rule.assigns("TAG") == .init(key: "TAG", attribute: nil, op: "+=", value: "systemd"))
        #expect(rule.assigns("ENV", "SYSTEMD_WANTS") == .init(key: "ENV", attribute: "SYSTEMD_WANTS", op: "+=", value: "tether.service"))
    }

    @Test func usbBluetoothControllersStayOutOfAutosuspend() throws {
        let rules = try UdevRule.lines(of: Packaging.read(Self.rulesPath)).map(UdevRule.init)
        let usb = rules.filter { rule in
            rule.matches("SUBSYSTEM") == "usb"
                && (rule.assigns("ATTR", "power/control") != nil || rule.assigns("ATTR", "../power/control") != nil)
        }
        #expect(usb.count == 2)
        let device = try #require(usb.first { $0.matches("ENV", "DEVTYPE") == "usb_device" })
        #expect(device.matches("ATTR", "bDeviceClass") == "e0")
        #expect(device.matches("ATTR", "bDeviceSubClass") == "01")
        #expect(device.matches("ATTR", "bDeviceProtocol") == "01")
        #expect(device.assigns("ATTR", "power/control")?.value == "on")
        let interface = try #require(usb.first { $0.matches("ENV", "DEVTYPE") == "usb_interface" })
        #expect(interface.matches("ATTR", "bInterfaceClass") == "e0")
        #expect(interface.assigns("ATTR", "../power/control")?.value == "on")
        for rule in usb {
            // btusb turns autosuspend back on when it binds.
            #expect(rule.matches("ACTION")?.split(separator: "|").contains("bind") == true)
        }
    }

    /// The recovery steps' access, for the service alone and nothing wider:
    /// Bluetooth USB controllers' nodes (usb-reset) and /dev/rfkill, which
    /// switches every radio on the machine, go to group tether-hardware,
    /// whose only member is user tether (group tether is the readers'). The
    /// owner stays root's: bluetoothd opens /dev/rfkill read-write as root
    /// without CAP_DAC_OVERRIDE, and a node owned by user tether left it
    /// unable to (make e2e's systemd-rfkill-unblock: the adapter stayed off
    /// after the unblock). Read stays everyone's (rfkill events, lsusb).
    @Test func onlyTheServiceMayResetBluetoothUSBControllersAndChangeRfkill() throws {
        let rules = try UdevRule.lines(of: Packaging.read(Self.rulesPath)).map(UdevRule.init)
        #expect(!rules.contains { $0.assigns("OWNER") != nil }, "no rule takes a node from root")
        let access = rules.filter { $0.assigns("GROUP") != nil }
        #expect(access.count == 3)
        for rule in access {
            #expect(rule.assigns("GROUP")?.value == "tether-hardware")
            let mode = try #require(rule.assigns("MODE").flatMap { Int($0.value, radix: 8) }, "\(rule.pairs)")
            #expect(mode & 0o660 == 0o660, "the owner (root) and the group read and write: \(String(mode, radix: 8))")
            #expect(mode & 0o002 == 0, "others may not write: \(String(mode, radix: 8))")
            #expect(mode & 0o004 == 0o004, "everyone keeps read (rfkill events, lsusb): \(String(mode, radix: 8))")
        }
        let byClass = try #require(access.first { $0.matches("ATTR", "bDeviceClass") != nil })
        #expect(byClass.matches("SUBSYSTEM") == "usb" && byClass.matches("ENV", "DEVTYPE") == "usb_device")
        #expect(byClass.matches("ATTR", "bDeviceClass") == "e0" && byClass.matches("ATTR", "bDeviceProtocol") == "01")
        let byInterface = try #require(access.first { $0.matches("ENV", "ID_USB_INTERFACES") != nil })
        #expect(byInterface.matches("ENV", "ID_USB_INTERFACES") == "*:e00101:*")
        let rfkill = try #require(access.first { $0.matches("KERNEL") == "rfkill" })
        #expect(rfkill.matches("SUBSYSTEM") == "misc")
    }

    static var canRunUdevadm: Bool {
        guard getuid() == 0, Packaging.which("udevadm") != nil, Packaging.which("unshare") != nil,
              FileManager.default.fileExists(atPath: "/sys/class/net/lo"),
              FileManager.default.fileExists(atPath: "/etc/udev/rules.d")
        else { return false }
        return (try? Packaging.run("unshare", ["-m", "true"]).status) == 0
    }

    /// udevadm reads the rules (in a private mount namespace, over an empty
    /// /etc/udev/rules.d) and reports no error for them; a broken copy does
    /// get reported, so the check can fail. systemd 252's udevadm has no
    /// `verify`; `test` on the loopback interface loads every rules file.
    @Test(.enabled(if: canRunUdevadm, "needs root, udevadm and unshare -m"))
    func udevadmLoadsTheRulesWithoutErrors() throws {
        let directory = try TemporaryDirectory("tether-udev")
        defer { directory.remove() }
        func load(_ text: String) throws -> [String] {
            try text.write(toFile: "\(directory.path)/70-tether.rules", atomically: false, encoding: .utf8)
            let result = try Packaging.run("unshare", [
                "-m", "sh", "-c",
                "mount --bind \"$0\" /etc/udev/rules.d && udevadm test --action=add /sys/class/net/lo", directory.path,
            ])
            #expect(result.output.contains("Reading rules file: /etc/udev/rules.d/70-tether.rules"), "\(result)")
            // Until the package's sysusers.d has run, group tether-hardware
            // does not exist, and udev ignores (and says so) the rules that
            // name it; the postinst reloads the rules after creating it.
            let groupMissing = getgrnam("tether-hardware") == nil
            return result.output.split(separator: "\n").map(String.init).filter {
                $0.contains("70-tether.rules:") && !(groupMissing && $0.contains("Unknown group 'tether-hardware'"))
            }
        }
        let rules = try Packaging.read(Self.rulesPath)
        #expect(try load(rules) == [])
        let broken = try load(rules.replacingOccurrences(of: #"SUBSYSTEM=="bluetooth""#, with: #"SUBSYSTEM="bluetooth""#))
        #expect(!broken.isEmpty)
    }

    @Test(.enabled(if: Packaging.which("systemd-sysusers") != nil, "needs systemd-sysusers"))
    func sysusersCreatesTheUserAndItsGroups() throws {
        let directory = try TemporaryDirectory("tether-sysusers")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: "\(directory.path)/etc", withIntermediateDirectories: true)
        let result = try Packaging.run(
            "systemd-sysusers", ["--root=\(directory.path)", "-"], stdin: Packaging.path("systemd/tether.sysusers"))
        try #require(result.status == 0, "systemd-sysusers: \(result)")

        let passwd = try Packaging.read("\(directory.path)/etc/passwd").split(separator: "\n")
        let user = try #require(passwd.first { $0.hasPrefix("tether:") }).split(separator: ":", omittingEmptySubsequences: false)
        #expect(user.count == 7)
        let uid = try #require(Int(user[2]))
        #expect(uid > 0 && uid < 1000, "a system user")
        #expect(user[5] == "/var/lib/tether")
        #expect(user[6].hasSuffix("nologin"))

        let groups = try Packaging.read("\(directory.path)/etc/group").split(separator: "\n")
            .map { $0.split(separator: ":", omittingEmptySubsequences: false) }
        let tether = try #require(groups.first { $0[0] == "tether" })
        #expect(tether[2] == user[3], "tether's primary group is tether")
        let bluetooth = try #require(groups.first { $0[0] == "bluetooth" })
        #expect(bluetooth[3].split(separator: ",").contains("tether"))

        // The forwarder's own user: in group tether (to read the readings), not in bluetooth.
        let forwarder = try #require(passwd.first { $0.hasPrefix("tether-forward:") }).split(separator: ":", omittingEmptySubsequences: false)
        #expect(forwarder[5] == "/var/lib/tether-forward")
        #expect(forwarder[6].hasSuffix("nologin"))
        #expect(tether[3].split(separator: ",").contains("tether-forward"))
        #expect(!bluetooth[3].split(separator: ",").contains("tether-forward"))

        // The operators' group: a system group, created empty (the admin puts
        // people in it; the postinst moves group tether's on the upgrade
        // that brings it). Neither service user is in it: the daemon does
        // not call itself, the forwarder has no business on the bus.
        let admin = try #require(groups.first { $0[0] == "tether-admin" }, "sysusers declares group tether-admin")
        let adminGID = try #require(Int(admin[2]))
        #expect(adminGID > 0 && adminGID < 1000, "a system group")
        #expect(admin[2] != tether[2])
        #expect(admin[3].isEmpty, "tether-admin starts empty: \(admin[3])")
        #expect(!passwd.contains { $0.hasPrefix("tether-admin:") }, "a group, no user")

        // The hardware group: the service's user is its only member.
        let hardware = try #require(groups.first { $0[0] == "tether-hardware" }, "sysusers declares group tether-hardware")
        #expect(hardware[3].split(separator: ",") == ["tether"], "only user tether: \(hardware[3])")
        #expect(hardware[2] != tether[2] && hardware[2] != admin[2])
    }
}
