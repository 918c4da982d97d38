import Foundation
import TestSupport
import Testing

/// The Debian package `make deb` builds (`make test` builds it first and
/// says where, in TETHER_DEB_DIR): its control data, its files, the binary
/// in it, and lintian's verdict.
@Suite(.serialized) struct DebianPackageTests {
    /// The package, if one was built: TETHER_DEB_DIR, else .build/deb.
    static let package: String? = {
        let directory = ProcessInfo.processInfo.environment["TETHER_DEB_DIR"] ?? Packaging.path(".build/deb")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasPrefix("tether_") && $0.hasSuffix(".deb") }.sorted().last.map { "\(directory)/\($0)" }
    }()

    static var canInspect: Bool { package != nil && Packaging.which("dpkg-deb") != nil }

    static func field(_ name: String, in control: String) -> String? {
        control.split(separator: "\n").first { $0.hasPrefix(" \(name): ") }.map {
            String($0.dropFirst(name.count + 3))
        }
    }

    @Test(.enabled(if: canInspect, "no package: `make deb` (make test runs it first) and dpkg-deb"))
    func controlDataSaysWhatItNeeds() throws {
        let package = try #require(Self.package)
        let info = try Packaging.run("dpkg-deb", ["-I", package])
        try #require(info.status == 0, "\(info)")
        #expect(Self.field("Package", in: info.output) == "tether")
        let version = try #require(Self.field("Version", in: info.output))
        #expect(version.first?.isNumber == true, "a Debian version starts with a digit: \(version)")
        #expect(package.hasSuffix("tether_\(version)_\(Self.field("Architecture", in: info.output) ?? "?").deb"))
        let depends = try #require(Self.field("Depends", in: info.output))
        for library in ["libc6", "libdbus-1-3", "libbluetooth3", "libmosquitto1", "libssl3"] {
            #expect(depends.contains(library), "Depends (from dpkg-shlibdeps) names \(library): \(depends)")
        }
        #expect(!depends.contains("swift"), "the Swift runtime is linked statically: \(depends)")
        #expect(Self.field("Recommends", in: info.output) == "bluez")
        for script in ["postinst", "prerm", "postrm", "conffiles", "md5sums"] {
            #expect(info.output.contains(" \(script)"), "the control archive has \(script)")
        }

        let directory = try TemporaryDirectory("tether-deb")
        defer { directory.remove() }
        let control = try Packaging.run("dpkg-deb", ["-e", package, "\(directory.path)/DEBIAN"])
        try #require(control.status == 0, "\(control)")
        let conffiles = try String(contentsOfFile: "\(directory.path)/DEBIAN/conffiles", encoding: .utf8)
        #expect(conffiles == "/etc/tether/tether.toml\n")
        for script in ["postinst", "prerm", "postrm"] {
            let syntax = try Packaging.run("/bin/sh", ["-n", "\(directory.path)/DEBIAN/\(script)"])
            #expect(syntax.status == 0, "\(script): \(syntax)")
            #expect(FileManager.default.isExecutableFile(atPath: "\(directory.path)/DEBIAN/\(script)"))
        }
        let postinst = try String(contentsOfFile: "\(directory.path)/DEBIAN/postinst", encoding: .utf8)
        #expect(postinst.contains("systemd-sysusers tether.conf") && postinst.contains("daemon-reload")
                && postinst.contains("udevadm control --reload") && postinst.contains("ReloadConfig"))
        // The upgrade that brings group tether-admin moves group tether's
        // people into it and checks the configs (PostinstTests runs it).
        #expect(postinst == (try Packaging.read(Packaging.path("packaging/deb/postinst"))), "the package's postinst is the source's")
        #expect(postinst.contains("tether-admin") && postinst.contains("check-config"))
        let postrm = try String(contentsOfFile: "\(directory.path)/DEBIAN/postrm", encoding: .utf8)
        #expect(postrm.contains(#"if [ "$1" = "purge" ]"#) && postrm.contains("/var/lib/tether"),
                "config and state go on purge only")
    }

    @Test(.enabled(if: canInspect, "no package: `make deb` (make test runs it first) and dpkg-deb"))
    func itHoldsEveryFileAndAStaticBinary() throws {
        let package = try #require(Self.package)
        let listing = try Packaging.run("dpkg-deb", ["-c", package])
        try #require(listing.status == 0, "\(listing)")
        let paths = Set(listing.output.split(separator: "\n").compactMap { $0.split(separator: " ").last.map(String.init) })
        let expected = [
            "./usr/bin/tether", "./etc/tether/tether.toml",
            "./lib/systemd/system/tether.service", "./lib/systemd/system/tether@.service",
            "./lib/systemd/system/tether-forward.service", "./lib/systemd/system/tether-forward@.service",
            "./lib/systemd/system/tether-serdev-rebind@.service",
            "./lib/systemd/system/bluetooth.service.d/tether.conf",
            "./usr/lib/sysusers.d/tether.conf", "./usr/share/dbus-1/system.d/io.tether.Tether.conf",
            "./lib/udev/rules.d/70-tether.rules",
            "./usr/share/man/man1/tether.1.gz", "./usr/share/man/man1/tether.run.1.gz",
            "./usr/share/man/man1/tether.forward.1.gz", "./usr/share/man/man1/tether.status.1.gz",
            "./usr/share/man/man5/tether.toml.5.gz",
            "./usr/share/bash-completion/completions/tether", "./usr/share/zsh/vendor-completions/_tether",
            "./usr/share/fish/vendor_completions.d/tether.fish",
            "./usr/share/doc/tether/copyright", "./usr/share/doc/tether/changelog.gz",
            "./usr/share/doc/tether/examples/metrics-textfile.conf", "./usr/share/doc/tether/examples/tether-alerts.yml",
            "./usr/share/tether/reading.schema.json",
            "./usr/share/lintian/overrides/tether",
        ]
        for path in expected {
            #expect(paths.contains(path), "the package holds \(path)")
        }

        let directory = try TemporaryDirectory("tether-deb")
        defer { directory.remove() }
        let extract = try Packaging.run("dpkg-deb", ["-x", package, directory.path])
        try #require(extract.status == 0, "\(extract)")
        let binary = "\(directory.path)/usr/bin/tether"
        let libraries = try Packaging.run("ldd", [binary])
        #expect(!libraries.output.contains("libswift"), "the Swift runtime is in the binary: \(libraries)")
        #expect(libraries.output.contains("libdbus-1.so.3"), "\(libraries)")
        // `tether forward` loads libmosquitto with dlopen: `tether run` never
        // maps it (nor libssl, libcrypto), and the package depends on it by name.
        #expect(!libraries.output.contains("libmosquitto"), "\(libraries)")
        let depends = try Packaging.run("dpkg-deb", ["-f", package, "Depends"])
        #expect(depends.output.contains("libmosquitto1"), "\(depends)")
        let version = try Packaging.run(binary, ["--version"])
        #expect(version.status == 0, "the packaged binary runs: \(version)")
        let info = try Packaging.run("dpkg-deb", ["-f", package, "Version"])
        #expect(version.output.trimmingCharacters(in: .whitespacesAndNewlines) == info.output.trimmingCharacters(in: .whitespacesAndNewlines),
                "tether --version is the package's version (both from packaging/version.sh)")
        // toml++ (under TOMLKit) reports a syntax error by throwing a C++
        // exception: the release link keeps the unwind tables that needs
        // while it drops Swift's (packaging/unwind-tables.ld). Without them
        // this would end in std::terminate, not in a refused config.
        let broken = "\(directory.path)/broken.toml"
        try "[dongle\naddress = \"AA:BB:CC:DD:EE:FF\"\n".write(toFile: broken, atomically: true, encoding: .utf8)
        let refused = try Packaging.run(binary, ["check-config", broken])
        #expect(refused.status == 78 && refused.output.contains("broken.toml:1: TOML syntax error"),
                "a broken config is refused with toml++'s message (EX_CONFIG): \(refused)")
        let unit = try String(contentsOfFile: "\(directory.path)/lib/systemd/system/tether.service", encoding: .utf8)
        #expect(unit.contains("\nExecStart=/usr/bin/tether run"), "the units run the packaged binary")
        let bash = try String(contentsOfFile: "\(directory.path)/usr/share/bash-completion/completions/tether", encoding: .utf8)
        #expect(!bash.hasPrefix("#!"), "bash-completion files are sourced, not run")
    }

    /// lintian: no error and no warning; the tags kept are overridden in
    /// packaging/deb/lintian-overrides, each with its reason.
    @Test(.enabled(if: canInspect && Packaging.which("lintian") != nil, "no package, or no lintian"))
    func lintianFindsNoErrorOrWarning() throws {
        let package = try #require(Self.package)
        let lintian = try Packaging.run("lintian", ["--fail-on", "error,warning", package])
        let findings = lintian.output.split(separator: "\n").filter { $0.hasPrefix("E:") || $0.hasPrefix("W:") }
        #expect(lintian.status == 0 && findings.isEmpty, "\(lintian)")
        let overridden = try Packaging.run("lintian", ["--show-overrides", package])
        let tags = Set(overridden.output.split(separator: "\n").filter { $0.hasPrefix("O:") }.compactMap {
            $0.split(separator: " ").dropFirst(2).first.map(String.init)
        })
        #expect(tags.isSubset(of: ["dbus-policy-excessively-broad", "dbus-policy-without-send-destination", "bad-whatis-entry"]),
                "only the overrides with a written reason: \(tags)")
    }
}
