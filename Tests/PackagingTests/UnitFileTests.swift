import Foundation
import TestSupport
import Testing

/// systemd/tether.service and systemd/tether@.service: what the issue asks of
/// them, their sandbox score, and `systemd-analyze verify` on them as installed.
@Suite(.serialized) struct UnitFileTests {
    static let units = ["tether.service", "tether@.service"]
    static let forwardUnits = ["tether-forward.service", "tether-forward@.service"]
    /// Restarted by uart-reattach for a UART controller the kernel attached.
    static let serdevRebindUnit = "tether-serdev-rebind@.service"
    /// The highest overall exposure `systemd-analyze security` may give (0–10).
    static let exposureLimit = 2.0

    static func source(_ unit: String) -> String { Packaging.path("systemd/\(unit)") }

    // MARK: - Contents

    @Test(arguments: units) func declaresWhatTheServiceNeeds(unit: String) throws {
        let file = try UnitFile(path: Self.source(unit))
        let expected: [(String, String)] = [
            ("Type", "notify"), ("NotifyAccess", "main"), ("Restart", "on-failure"),
            ("User", "tether"), ("Group", "tether"), ("SupplementaryGroups", "bluetooth tether-hardware"),
            ("ConfigurationDirectory", "tether"), ("UMask", "0027"), ("NoNewPrivileges", "yes"),
            ("CapabilityBoundingSet", "CAP_NET_ADMIN"), ("AmbientCapabilities", "CAP_NET_ADMIN"),
            ("ProtectSystem", "strict"), ("PrivateDevices", "yes"), ("IPAddressDeny", "any"),
            ("SystemCallArchitectures", "native"), ("MemoryDenyWriteExecute", "yes"),
            // Both break the HCI reset (see the comments in the unit).
            ("PrivateNetwork", "no"), ("PrivateUsers", "no"),
        ]
        for (key, value) in expected {
            #expect(file.value(key) == value, "\(unit): \(key)")
        }
        #expect(file.value("WatchdogSec") != nil, "\(unit): WatchdogSec")
        #expect(file.value("TimeoutStopSec").flatMap { Int($0.replacingOccurrences(of: "s", with: "")) }.map { $0 >= 10 } == true,
                "\(unit): TimeoutStopSec must leave time to flush the readings")
        #expect(file.values("After", in: "Unit").joined(separator: " ").split(separator: " ").contains("bluetooth.service"))
        #expect(file.values("Wants", in: "Unit").joined(separator: " ").split(separator: " ").contains("bluetooth.service"))
        let families = file.values("RestrictAddressFamilies").joined(separator: " ").split(separator: " ").map(String.init)
        #expect(Set(families) == ["AF_UNIX", "AF_BLUETOOTH"], "\(unit): address families \(families)")
        #expect(file.values("SystemCallFilter") == ["@system-service", "~@privileged @resources", "setpriority"])
        #expect(file.value("LimitNICE") == "-4", "libdispatch's worker threads ask for nice -4 (WorkerThreadPriorityTests)")
        #expect(file.values("WantedBy", in: "Install") == ["multi-user.target"])
    }

    /// The forwarder: its own user in group tether, the network and nothing
    /// else (no capabilities, no Bluetooth), the readings read only.
    @Test(arguments: forwardUnits) func theForwardersUnitsDeclareItsSandbox(unit: String) throws {
        let file = try UnitFile(path: Self.source(unit))
        let expected: [(String, String)] = [
            ("Type", "notify"), ("NotifyAccess", "main"), ("Restart", "on-failure"),
            ("User", "tether-forward"), ("Group", "tether"),
            ("StateDirectory", "tether-forward"), ("ReadOnlyPaths", "-/var/lib/tether"),
            ("CapabilityBoundingSet", ""), ("AmbientCapabilities", ""), ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"), ("RestartPreventExitStatus", "78"),
        ]
        for (key, value) in expected {
            #expect(file.value(key) == value, "\(unit): \(key)")
        }
        #expect(file.value("WatchdogSec") != nil)
        let families = file.values("RestrictAddressFamilies").joined(separator: " ").split(separator: " ").map(String.init)
        #expect(Set(families) == ["AF_UNIX", "AF_INET", "AF_INET6"], "\(unit): address families \(families)")
        #expect(file.value("IPAddressDeny") == nil, "the forwarder needs the network")
        // No capability at all: the bounding set and the ambient set empty,
        // and nothing adds one back further down.
        #expect(file.values("CapabilityBoundingSet") == [""], "\(unit): \(file.values("CapabilityBoundingSet"))")
        #expect(file.values("AmbientCapabilities") == [""], "\(unit): \(file.values("AmbientCapabilities"))")
        #expect(file.values("SupplementaryGroups").isEmpty, "\(unit): no group beyond tether (not tether-admin, not bluetooth)")
        // No path to the system bus: the daemon's Reconnect and bluetoothd
        // are out of its reach (it uses no D-Bus).
        let inaccessible = file.values("InaccessiblePaths").joined(separator: " ").split(separator: " ").map(String.init)
        #expect(inaccessible.contains("-/run/dbus"), "\(unit): InaccessiblePaths \(inaccessible)")
        #expect(inaccessible.contains("-/var/run/dbus"), "\(unit): InaccessiblePaths \(inaccessible)")
        for path in ["/run/dbus", "/var/run/dbus", "/run", "/var/run"] {
            let listed = (file.values("ReadOnlyPaths") + file.values("ReadWritePaths") + file.values("BindPaths") + file.values("BindReadOnlyPaths"))
                .joined(separator: " ").split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "-+")) }
            #expect(!listed.contains(path), "\(unit): \(path) bound back in")
        }
    }

    /// The daemon keeps CAP_NET_ADMIN only, and its unit says what for (the
    /// management socket's disconnect reasons, hci-reset) and what not.
    @Test(arguments: units) func theDaemonsCapabilityIsExplained(unit: String) throws {
        let file = try UnitFile(path: Self.source(unit))
        #expect(file.values("CapabilityBoundingSet") == ["CAP_NET_ADMIN"])
        #expect(file.values("AmbientCapabilities") == ["CAP_NET_ADMIN"])
        #expect(file.values("InaccessiblePaths").isEmpty, "the daemon needs the system bus")
        let text = try Packaging.read(Self.source(unit))
        for phrase in ["HCI_CHANNEL_CONTROL", "Device Disconnected", "\"hci-reset\"", "Not for \"power-cycle\""] {
            #expect(text.contains(phrase), "\(unit)'s comment on CAP_NET_ADMIN names \(phrase)")
        }
        #expect(!text.contains("gives group tether write access"), "\(unit): the device nodes are user tether's now")
    }

    /// The drop-in the package ships as an example: it adds the metrics
    /// textfile directory to the writable paths, and nothing else.
    /// Root for one thing only: the serial bus's sysfs files, writable in a
    /// sandbox that has no capability, no network and nothing else
    /// writable; no [Install]: only uart-reattach (or an operator) starts it.
    @Test func theSerdevRebindUnitIsRootWithNothingButTheSerialBus() throws {
        let file = try UnitFile(path: Self.source(Self.serdevRebindUnit))
        let expected: [(String, String)] = [
            ("Type", "oneshot"), ("CapabilityBoundingSet", ""), ("AmbientCapabilities", ""), ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"), ("ProtectKernelTunables", "yes"), ("ReadWritePaths", "-/sys/bus/serial"),
            ("PrivateNetwork", "yes"), ("PrivateDevices", "yes"), ("SystemCallArchitectures", "native"),
        ]
        for (key, value) in expected {
            #expect(file.value(key) == value, "\(key)")
        }
        #expect(file.value("User") == nil, "root: the sysfs files are root's")
        #expect(file.value("ExecStart")?.hasSuffix("/tether serdev-rebind -- %i") == true)
        #expect(file.values("WantedBy", in: "Install").isEmpty)
    }

    @Test func theMetricsDropInOnlyAddsTheTextfileDirectory() throws {
        let dropIn = try UnitFile(path: Packaging.path("systemd/metrics-textfile.conf"))
        #expect(dropIn.directives.map(\.key) == ["ReadWritePaths"])
        #expect(dropIn.value("ReadWritePaths") == "/var/lib/prometheus/node-exporter")
    }

    @Test func theForwarderTemplateDiffersOnlyInTheInstance() throws {
        let plain = try UnitFile(path: Self.source("tether-forward.service"))
        let template = try UnitFile(path: Self.source("tether-forward@.service"))
        #expect(plain.value("ExecStart")?.hasSuffix("/tether forward") == true)
        #expect(template.value("ExecStart")?.hasSuffix("/tether forward --instance %i") == true)
        let instanceKeys: Set<String> = ["Description", "ExecStart", "After"]
        #expect(plain.directives.filter { !instanceKeys.contains($0.key) } == template.directives.filter { !instanceKeys.contains($0.key) })
    }

    @Test func templateRunsOneInstancePerDongle() throws {
        let plain = try UnitFile(path: Self.source("tether.service"))
        let template = try UnitFile(path: Self.source("tether@.service"))
        #expect(plain.value("ExecStart")?.hasSuffix("/tether run") == true)
        #expect(template.value("ExecStart")?.hasSuffix("/tether run --instance %i") == true)
        #expect(plain.value("StateDirectory") == "tether")
        #expect(template.value("StateDirectory") == "tether/%i")
        #expect(template.value("Description", in: "Unit")?.contains("%i") == true)
    }

    /// The two files must differ only where the instance shows, so that a
    /// sandbox change made to one is not forgotten in the other.
    @Test func templateAndDefaultUnitDifferOnlyInTheInstance() throws {
        let instanceKeys: Set<String> = ["Description", "ExecStart", "StateDirectory"]
        let plain = try UnitFile(path: Self.source("tether.service")).directives.filter { !instanceKeys.contains($0.key) }
        let template = try UnitFile(path: Self.source("tether@.service")).directives.filter { !instanceKeys.contains($0.key) }
        #expect(plain == template)
        if plain != template {
            let onlyPlain = plain.filter { !template.contains($0) }.map { "\($0.key)=\($0.value)" }
            let onlyTemplate = template.filter { !plain.contains($0) }.map { "\($0.key)=\($0.value)" }
            Issue.record("only in tether.service: \(onlyPlain); only in tether@.service: \(onlyTemplate)")
        }
    }

    // MARK: - systemd-analyze security

    static func overallExposure(_ unitPath: String) throws -> (Double, Packaging.Result) {
        let result = try Packaging.run("systemd-analyze", ["security", "--offline=yes", "--no-pager", unitPath])
        let line = result.output.split(separator: "\n").first { $0.contains("Overall exposure level for") }
        let figure = line.flatMap { $0.split(separator: ":").last }
            .flatMap { $0.split(separator: " ").first }
            .flatMap { Double($0) }
        return (try #require(figure, "no overall exposure in:\n\(result.output)"), result)
    }

    @Test(.enabled(if: Packaging.hasSystemdAnalyze, "needs systemd-analyze"), arguments: units + forwardUnits + [serdevRebindUnit])
    func sandboxExposureIsAtMostTwo(unit: String) throws {
        let (exposure, result) = try Self.overallExposure(Self.source(unit))
        print("figure: systemd-analyze security --offline=yes \(unit): overall exposure \(exposure) (limit \(Self.exposureLimit))")
        #expect(exposure <= Self.exposureLimit, "\(result.output)")
        #expect(result.status == 0)
    }

    /// The check can fail: an unsandboxed unit scores far above the limit.
    @Test(.enabled(if: Packaging.hasSystemdAnalyze, "needs systemd-analyze"))
    func anUnsandboxedUnitScoresAboveTheLimit() throws {
        let directory = try TemporaryDirectory("tether-packaging")
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("plain.service").path
        try "[Service]\nExecStart=/bin/true\n".write(toFile: path, atomically: false, encoding: .utf8)
        let (exposure, _) = try Self.overallExposure(path)
        #expect(exposure > Self.exposureLimit)
        // --threshold= is ten times the exposure: 20 means 2.0.
        let thresholded = try Packaging.run("systemd-analyze", ["security", "--offline=yes", "--threshold=20", path])
        #expect(thresholded.status != 0)
    }

    // MARK: - systemd-analyze verify

    /// Installs into a temporary root, points the installed units' ExecStart at
    /// the binary installed there (verify insists it exists; `verify --root=`
    /// would also want systemd's own units in that root) and MANPATH at the
    /// installed man pages (verify checks Documentation=).
    static func verifyInstalled(
        binary: String, in directory: TemporaryDirectory, edit: (String) -> String = { $0 }
    ) throws -> Packaging.Result {
        let install = try Packaging.install(into: directory, binary: binary)
        try #require(install.status == 0, "make install: \(install)")
        let root = "\(directory.path)/root"
        let copies = directory.url.appendingPathComponent("verify")
        try FileManager.default.createDirectory(at: copies, withIntermediateDirectories: true)
        var paths: [String] = []
        for unit in units + forwardUnits + [serdevRebindUnit] {
            let installed = try Packaging.read("\(root)/usr/lib/systemd/system/\(unit)")
            let rewritten = installed.replacingOccurrences(of: "ExecStart=/usr/bin/tether ", with: "ExecStart=\(root)/usr/bin/tether ")
            #expect(rewritten != installed, "\(unit): installed ExecStart is not /usr/bin/tether")
            let path = copies.appendingPathComponent(unit).path
            try edit(rewritten).write(toFile: path, atomically: false, encoding: .utf8)
            paths.append(path)
        }
        return try Packaging.run(
            "systemd-analyze", ["verify", "--recursive-errors=no"] + paths,
            environment: ["MANPATH": "\(root)/usr/share/man"])
    }

    @Test(.enabled(if: Packaging.hasSystemdAnalyze && Packaging.canInstall, "needs systemd-analyze, make and swift"))
    func verifyPassesOnTheInstalledUnits() throws {
        let binary = try Packaging.requireBinary()
        let directory = try TemporaryDirectory("tether-packaging")
        defer { directory.remove() }
        let result = try Self.verifyInstalled(binary: binary, in: directory)
        #expect(result.status == 0, "systemd-analyze verify: \(result)")
        #expect(!result.output.contains("tether"), "systemd-analyze verify complained: \(result.output)")
    }

    /// The check can fail: a missing binary or man page is an error.
    @Test(.enabled(if: Packaging.hasSystemdAnalyze && Packaging.canInstall, "needs systemd-analyze, make and swift"))
    func verifyFailsOnAMissingBinaryOrManPage() throws {
        let binary = try Packaging.requireBinary()
        let directory = try TemporaryDirectory("tether-packaging")
        defer { directory.remove() }
        let noBinary = try Self.verifyInstalled(binary: binary, in: directory) {
            $0.replacingOccurrences(of: "/usr/bin/tether ", with: "/usr/bin/no-such-tether ")
        }
        #expect(noBinary.status != 0)
        #expect(noBinary.output.contains("no-such-tether"))
        let noManPage = try Self.verifyInstalled(binary: binary, in: directory) {
            $0.replacingOccurrences(of: "man:tether.run(1)", with: "man:tether.no-such-page(1)")
        }
        #expect(noManPage.status != 0)
    }

    /// `make check-units` runs both checks and passes.
    @Test(.enabled(if: Packaging.hasSystemdAnalyze && Packaging.canInstall, "needs systemd-analyze, make and swift"))
    func makeCheckUnitsPasses() throws {
        let binary = try Packaging.requireBinary()
        let directory = try TemporaryDirectory("tether-packaging")
        defer { directory.remove() }
        let result = try Packaging.make(["check-units", "TETHER_BIN=\(binary)", "CHECK_DIR=\(directory.path)/check"])
        #expect(result.status == 0, "make check-units: \(result)")
        #expect(result.output.contains("Overall exposure level for tether.service"))
        #expect(result.output.contains("Overall exposure level for tether@"))
        #expect(result.output.contains("Overall exposure level for tether-forward.service"))
        #expect(result.output.contains("Overall exposure level for tether-serdev-rebind@"))
    }
}
