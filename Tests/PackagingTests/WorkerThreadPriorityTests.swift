import Foundation
import TestSupport
import Testing

/// Issue 13's first defect: under the units' sandbox, libdispatch (Swift's
/// concurrency runtime on Linux) logged "Failed to set thread priority for
/// worker thread" for every worker thread it started: the system call filter
/// denied setpriority() with EPERM, and without the filter an unprivileged
/// thread may not lower its nice value to the -4 of libdispatch's highest
/// QoS (EACCES). The units now allow setpriority() and set LimitNICE=-4.
///
/// The daemon runs here as user nobody with the setpriority() verdict each
/// unit's filter gives (emulated with libseccomp, as systemd installs it),
/// under strace, libdispatch logging to stderr. RLIMIT_NICE cannot be raised
/// in this sandbox (it has no CAP_SYS_RESOURCE), so where the unit's
/// LimitNICE= permits a nice value the run has CAP_SYS_NICE instead, and the
/// test checks from strace that no thread asked for a lower value than the
/// unit permits: together that is what the unit gives. A control run without
/// the units' allowances showed that the lines the test looks for did come.
///
/// Since the daemons start no libdispatch worker thread at all (their root
/// task and every child run on Tether's own event loops: see
/// docs/architecture.md, "Concurrency"), nothing asks for a priority, under
/// the units or without their allowances; the allowances stay, in case a
/// later change brings a worker thread back, and this suite says so if it does.
@Suite(.serialized, .enabled(if: getuid() == 0, "runs the daemon as user nobody: needs root"))
struct WorkerThreadPriorityTests {
    static let complaint = "Failed to set thread priority for worker thread"

    @Test(arguments: UnitFileTests.units + UnitFileTests.forwardUnits)
    func theUnitsSandboxKeepsLibdispatchQuiet(unit: String) throws {
        let file = try UnitFile(path: UnitFileTests.source(unit))
        let limit = try #require(file.value("LimitNICE").flatMap(Self.rawNiceLimit), "\(unit) sets LimitNICE")
        let floor = 20 - limit  // the lowest nice value RLIMIT_NICE permits
        let allowed = try Self.setpriorityAllowed(filters: file.values("SystemCallFilter"))
        #expect(allowed, "\(unit): setpriority() must pass the system call filter")
        let run = try Self.runDaemon(forward: unit.hasPrefix("tether-forward"), permitNice: floor < 0, denySetpriority: !allowed)
        print("figure: \(unit)'s sandbox (lowest nice \(floor), setpriority \(allowed ? "allowed" : "denied")): \(run.complaints) libdispatch priority lines in \(run.seconds) s; nice values asked: \(Set(run.asked).sorted())")
        #expect(run.started, "the daemon ran: \(run.output.suffix(2000))")
        #expect(run.asked.allSatisfy { $0 >= floor }, "asked \(run.asked.min() ?? 0), below LimitNICE's \(floor)")
        #expect(run.complaints == 0, "\(run.output.suffix(2000))")
    }

    /// What the units did before, and a plain unprivileged user: before the
    /// daemons left libdispatch's worker pool, the lines came here (errno 1
    /// with setpriority() denied, 13 without CAP_SYS_NICE). Now no worker
    /// thread starts, so nothing asks for a priority and nothing complains.
    @Test(arguments: [(false, true), (false, false), (true, true)])
    func theDaemonsStartNoLibdispatchWorkerSoNothingAsksForAPriority(forward: Bool, denySetpriority: Bool) throws {
        let run = try Self.runDaemon(forward: forward, permitNice: false, denySetpriority: denySetpriority)
        print("figure: tether \(forward ? "forward" : "run") unprivileged, setpriority \(denySetpriority ? "denied" : "allowed"): \(run.complaints) libdispatch priority lines, \(run.asked.count) setpriority() calls in \(run.seconds) s")
        #expect(run.started, "the daemon ran: \(run.output.suffix(2000))")
        #expect(run.asked.isEmpty, "a thread asked for a priority: a libdispatch worker ran")
        #expect(run.complaints == 0, "\(run.output.suffix(2000))")
    }

    struct Run {
        var complaints: Int
        var started: Bool
        /// The nice values setpriority() was called with.
        var asked: [Int]
        var output: String
        var seconds: Int
    }

    /// `tether run` (or `tether forward`) as nobody for a few seconds (no bus
    /// or broker to talk to: the worker threads start all the same), then SIGTERM.
    /// - Parameter permitNice: CAP_SYS_NICE, standing in for an RLIMIT_NICE
    ///   this sandbox cannot raise.
    static func runDaemon(forward: Bool, permitNice: Bool, denySetpriority: Bool, seconds: Int = 3) throws -> Run {
        let binary = try Packaging.requireBinary()
        let directory = try TemporaryDirectory("worker-priority")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        try FileManager.default.createDirectory(atPath: readings, withIntermediateDirectories: false)
        chmod(readings, 0o777)
        chmod(directory.path, 0o755)
        let config = directory.path + "/tether.toml"
        try "[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\n[readings]\ndirectory = \"\(readings)\"\n[mqtt]\nurl = \"mqtt://127.0.0.1:1\"\n"
            .write(toFile: config, atomically: false, encoding: .utf8)
        chmod(config, 0o644)
        // The binary may sit under a directory nobody cannot enter, so it
        // runs from a copy. The shell makes the copy: had this process
        // written it, a child forked meanwhile by a test running beside this
        // one could inherit the open file, and exec would fail with ETXTBSY.
        let copy = directory.path + "/tether"
        // As systemd does: the filter is installed last, just before exec.
        let seccomp = """
            import errno, os, seccomp, sys
            if sys.argv[1] == "deny":
                f = seccomp.SyscallFilter(seccomp.ALLOW)
                f.add_rule(seccomp.ERRNO(errno.EPERM), "setpriority")
                f.load()
            os.execv(sys.argv[2], sys.argv[2:])
            """
        let trace = directory.path + "/strace.txt"
        let command = [
            "/usr/bin/strace", "-f", "-qq", "-e", "trace=setpriority", "-o", trace,
            "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
        ] + (permitNice ? ["--inh-caps=+sys_nice", "--ambient-caps=+sys_nice"] : []) + [
            "/usr/bin/python3", "-c", seccomp, denySetpriority ? "deny" : "allow",
            copy,
        ] + (forward ? ["forward", "--state-directory", readings] : ["run"]) + ["--config", config]
        let script = """
            cp "$TETHER_BINARY" "$0" && chmod 755 "$0" || exit 70
            "$@" & pid=$!; sleep \(seconds); pkill -TERM -f "$0"; wait $pid
            """
        let result = try Packaging.run(
            "/bin/sh", ["-c", script, copy] + command,
            environment: [
                "LIBDISPATCH_LOG": "stderr", "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory.path)/no-bus",
                "TETHER_BINARY": binary,
            ],
            timeout: .seconds(30)
        )
        let traced = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
        let asked = traced.split(separator: "\n").compactMap { line -> Int? in
            guard let call = line.range(of: "setpriority(PRIO_PROCESS, 0, "),
                  let close = line[call.upperBound...].firstIndex(of: ")")
            else { return nil }
            return Int(line[call.upperBound..<close])
        }
        let complaints = result.output.components(separatedBy: complaint).count - 1
        return Run(
            complaints: complaints, started: result.output.contains(forward ? "cannot reach the broker" : "readings log"), asked: asked,
            output: result.output,
            seconds: seconds
        )
    }

    /// LimitNICE= as setrlimit takes it: `-4` and `+0` are nice values
    /// (20 − nice), a bare number is the raw limit.
    static func rawNiceLimit(_ text: String) -> Int? {
        if text.hasPrefix("-") || text.hasPrefix("+"), let nice = Int(text) { return 20 - nice }
        return Int(text)
    }

    /// Whether setpriority() passes SystemCallFilter= lines, read as systemd
    /// reads them: the first line decides the default (an allow list denies
    /// the rest, a `~` deny list allows it), each later line adds or removes.
    static func setpriorityAllowed(filters: [String]) throws -> Bool {
        var allowed: Bool?
        for line in filters {
            let deny = line.hasPrefix("~")
            let items = line.dropFirst(deny ? 1 : 0).split(separator: " ").map(String.init)
            if allowed == nil { allowed = deny }
            if try items.contains(where: { try $0 == "setpriority" || ($0.hasPrefix("@") && groupHolds($0, "setpriority")) }) {
                allowed = !deny
            }
        }
        return allowed ?? true
    }

    /// Whether a system call group holds `call`, its nested groups included.
    static func groupHolds(_ group: String, _ call: String) throws -> Bool {
        let listing = try Packaging.run("systemd-analyze", ["syscall-filter", group])
        let entries = listing.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }.dropFirst()
        if entries.contains(call) { return true }
        return try entries.filter { $0.hasPrefix("@") && $0 != group }.contains { try groupHolds($0, call) }
    }
}
