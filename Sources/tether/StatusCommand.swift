import ArgumentParser
import CommandLineArguments
import Configuration
import ControlAPI
import DurationUnits
import Forwarding
import FoundationEssentials
import LinkSupervisor
import Readings
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Readings
import Systemd
import TextColumns

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the daemon's state: link, device, last reading, reconnects, retry window.",
        discussion: """
            Reads the properties of io.tether.Tether1 on the system bus (anyone may), waiting at most --timeout \
            for the daemon's answer. With --json, prints \
            one JSON object with stable keys: instance, running, answering (false when the daemon owns its bus \
            name but did not answer within --timeout; the link's keys are then absent, as when it is not \
            running), state, device, adapter, controller (the adapter's bus, driver and port, as the kernel \
            says: "USB (btusb on 1-1:1.0)", "UART (hci_uart_bcm on serial0-0)", "virtual"), connected_since, \
            connected_for_seconds, last_reading_at, last_reading_age_seconds, readings_written, readings_pending \
            (received, not yet on disk), readings_dropped, readings_error (why the readings log refuses writes or \
            that the disk has not answered one for 5 s, \
            while it does), reconnects, \
            window_attempt, next_attempt_in_seconds, last_error, silence_limit_seconds, silence_events, \
            last_disconnect_reason, last_disconnect_at, adapter_problem (rfkill, a controller that failed its \
            initialisation, one on a placeholder address), bond_problem (a bond the dongle refuses), bluez_problem (bluetoothd owns its name \
            but does not answer: hung), and forwarder (times in UTC ISO 8601; null when not applicable). The forwarder's state (tether forward) is read from its files in \
            --forwarder-state-directory: null when no forwarder ever ran there, else an object with running, \
            connected, broker, since, acknowledged_seq, backlog (records on disk not yet acknowledged), \
            gap_records, last_error and error (why some of it could not be read). \
            Exit status: 0 when the daemon runs, 3 when it does not (the forwarder's state is printed either way), \
            4 when it owns its bus name but does not answer within --timeout (stopped or stuck: its status is \
            unknown; the message names its pid and what to do), 1 on other errors.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Flag(help: "Print JSON instead of text.")
    var json = false

    @Option(help: ArgumentHelp("Where tether forward keeps its cursor and status.", valueName: "directory"))
    var forwarderStateDirectory = "/var/lib/tether-forward"

    @Option(help: "How long to wait for the daemon's answer (e.g. 2s, 500ms); it answers in milliseconds unless stuck.")
    var timeout = DurationArgument(ControlClient.statusTimeout)

    func validate() throws {
        guard timeout.duration > .zero else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        let instance = try instanceOptions.resolved()
        let forwarder = ForwarderReport.read(stateDirectory: forwarderStateDirectory, instance: instance)
        let client = await ControlConnection.connect(instance)
        let status: LinkStatus
        do {
            status = try await client.status(timeout: timeout.duration)
        } catch {
            let daemon: StatusReport.Daemon
            switch error {
            case .notRunning: daemon = .notRunning
            case .notAnswering: daemon = .notAnswering
            default: ControlConnection.exit(error)
            }
            let report = StatusReport(instance: instance, daemon: daemon, forwarder: forwarder, now: Date())
            if json {
                print(report.json())
            } else if forwarder != nil {
                print(report.text())
            }
            if case .notAnswering = daemon { ControlConnection.fail(error.description, code: ClientExit.statusUnknown) }
            ControlConnection.exit(error)
        }
        let report = StatusReport(instance: instance, daemon: .answered(status), forwarder: forwarder, now: Date())
        print(json ? report.json() : report.text())
    }
}

/// The forwarder's part of `tether status`: its status file, its cursor and
/// the newest seq on disk, each read without asking the forwarder.
struct ForwarderReport {
    /// nil: the status file could not be read (see `error`).
    var state: ForwarderStatusFile.Contents?
    var alive: Bool
    var acknowledgedSeq: UInt64?
    var backlog: UInt64?
    /// What could not be read, and why.
    var error: String?

    /// nil when no forwarder ever ran with this state directory.
    static func read(stateDirectory: String, instance: InstanceName) -> ForwarderReport? {
        var report = ForwarderReport(state: nil, alive: false)
        var problems: [String] = []
        do {
            report.state = try ForwarderStatusFile(stateDirectory: stateDirectory, instance: instance).read()
        } catch {
            problems.append(error.description)
        }
        let cursor = ForwardCursor(stateDirectory: stateDirectory, instance: instance)
        if report.state == nil, problems.isEmpty, access(cursor.path, F_OK) != 0, errno == ENOENT {
            return nil
        }
        if let state = report.state {
            report.alive = ForwarderStatusFile.isAlive(state)
        }
        do {
            report.acknowledgedSeq = try cursor.load()
        } catch {
            problems.append(error.description)
        }
        if let state = report.state, let acknowledged = report.acknowledgedSeq {
            do {
                let last = try ReadingLogTail.lastSeq(inDirectory: state.readingsDirectory) ?? 0
                report.backlog = last > acknowledged ? last - acknowledged : 0
            } catch {
                problems.append("the backlog is unknown: \(error)")
            }
        }
        report.error = problems.isEmpty ? nil : problems.joined(separator: "; ")
        return report
    }
}

/// What `tether status` prints, in both of its forms.
struct StatusReport {
    /// What became of asking the daemon.
    enum Daemon {
        /// Nobody owns its bus name.
        case notRunning
        /// A process owns its bus name but did not answer in time.
        case notAnswering
        case answered(LinkStatus)
    }

    var instance: InstanceName
    var daemon: Daemon
    var forwarder: ForwarderReport?
    var now: Date
    /// This boot's id and CLOCK_BOOTTIME now: the forwarder's age comes
    /// from these when its file is of this boot.
    var boot: BootStamp? = BootClock.system().now()

    func text() -> String {
        var lines: [String] = []
        func row(_ label: String, _ value: String) {
            // An error text from a peer stays in its row.
            lines.append("  " + label.padded(to: 14) + PlainLogLine.escaped(value))
        }
        let s: LinkStatus
        switch daemon {
        case .notRunning, .notAnswering:
            lines.append("tether (\(instance)): " + (daemon.isRunning ? "not answering (status unknown)" : "not running"))
            forwarderRows(row)
            return lines.joined(separator: "\n")
        case .answered(let status):
            s = status
        }
        lines.append("tether (\(instance)): \(s.state.rawValue)")
        row("device", (s.device ?? "not found yet") + (s.adapter.map { " via \($0)" } ?? ""))
        if let adapter = s.adapter, let controller = s.controller {
            row("controller", "\(adapter): \(controller)")
        }
        if let since = s.connectedSince {
            row("connected", "for \(LinkStatus.age(now.timeIntervalSince(since))) (since \(Self.iso(since)))")
        } else {
            row("connected", "no")
        }
        if let last = s.lastReadingAt {
            row("last reading", "\(LinkStatus.age(now.timeIntervalSince(last))) ago, \(s.readingsWritten) written since start")
        } else {
            row("last reading", "none since start")
        }
        if let error = s.readingsError {
            row("readings", "NOT STORED: \(error); \(s.readingsPending) waiting in memory until the disk takes them")
        }
        if s.readingsDropped > 0 {
            row("readings lost", "\(s.readingsDropped) since start: the disk refused writes for longer than memory held them (gap records in the log)")
        }
        row("data", dataText(s))
        if let reason = s.lastDisconnectReason {
            row("last drop", reason + (s.lastDisconnectAt.map { ", \(LinkStatus.age(now.timeIntervalSince($0))) ago" } ?? ""))
        }
        if let problem = s.bluezProblem { row("bluetoothd", problem) }
        if let problem = s.adapterProblem { row("adapter", problem) }
        if let problem = s.bondProblem { row("bond", problem) }
        if let bound = s.boundDongle { row("bound to", "\(bound) (found by the config's name or service on its first link; `tether rebind` forgets it)") }
        if let since = s.awaySince {
            row("away", "not seen since \(LinkStatus.clockTime(since)) (\(LinkStatus.age(now.timeIntervalSince(since))) ago); the controller works, so Tether waits for it to advertise")
        }
        if let bootloader = s.bootloader {
            row("bootloader", "the dongle's DFU bootloader advertises (DfuTarg at \(bootloader)): its firmware is being updated; Tether waits for the dongle")
        }
        row("reconnects", "\(s.reconnects)")
        if s.windowAttempt > 0 || s.nextAttemptIn != nil {
            var window = s.windowAttempt > 0 ? "attempt \(s.windowAttempt)" : "no attempt yet"
            if let next = s.nextAttemptIn { window += ", next in \(DurationText.rounded(next))" }
            row("retry window", window)
        } else {
            row("retry window", "none")
        }
        if let error = s.lastError { row("last error", error) }
        forwarderRows(row)
        return lines.joined(separator: "\n")
    }

    /// Whether data flows, as far as the silence limit can tell.
    private func dataText(_ s: LinkStatus) -> String {
        let limit = s.silenceLimit.map { "silence limit \(DurationText.rounded($0))" } ?? "silence limit off"
        let events = s.silenceEvents > 0 ? "; \(s.silenceEvents) silence event\(s.silenceEvents == 1 ? "" : "s") since start" : ""
        switch s.state {
        case .online where s.silenceLimit != nil:
            return "flowing (\(limit))\(events)"
        case .online:
            return "not judged (\(limit))\(events)"
        case .waitingForData:
            return "connected but silent: no notification yet since subscribing (\(limit))\(events)"
        default:
            return "none: not online (\(limit))\(events)"
        }
    }

    /// How long the forwarder's connection has been as it is.
    private func forwarderAge(_ contents: ForwarderStatusFile.Contents) -> Double {
        ForwarderStatusFile.age(of: contents, now: now, boot: boot)
    }

    /// "forwarder  connected to HOST:PORT for 2h 3m; acknowledged seq 1234, backlog 0"
    private func forwarderRows(_ row: (String, String) -> Void) {
        guard let f = forwarder else { return }
        var state: String
        if let s = f.state {
            if !f.alive {
                state = "not running"
            } else if s.connected {
                state = "connected to \(s.broker) for \(LinkStatus.age(forwarderAge(s)))"
            } else {
                state = "not connected to \(s.broker) (for \(LinkStatus.age(forwarderAge(s))))"
            }
        } else {
            state = "state unknown"
        }
        if let acknowledged = f.acknowledgedSeq { state += "; acknowledged seq \(acknowledged)" }
        if let backlog = f.backlog { state += ", backlog \(backlog)" }
        row("forwarder", state)
        if let s = f.state, f.alive, let error = s.lastError { row("broker error", error) }
        if let s = f.state, s.gapRecords > 0 { row("forward gap", "\(s.gapRecords) records left the log undelivered") }
        if let s = f.state, let count = s.undecodableRecords, count > 0 {
            row("undecodable", "\(count) readings did not fit [decode]: forwarded with their hex alone")
        }
        if let error = f.error { row("forwarder", error) }
    }

    /// Keys are fixed and always present (null when not applicable), so that
    /// scripts can rely on them; new keys may be added, none renamed.
    func json() -> String {
        var fields: [(String, String)] = [
            ("instance", quote(instance.description)), ("running", daemon.isRunning ? "true" : "false"),
            ("answering", daemon.status == nil ? "false" : "true"),
        ]
        if let s = daemon.status {
            fields += [
                ("state", quote(s.state.rawValue)),
                ("device", s.device.map(quote) ?? "null"),
                ("adapter", s.adapter.map(quote) ?? "null"),
                ("connected_since", s.connectedSince.map { quote(Self.iso($0)) } ?? "null"),
                ("connected_for_seconds", s.connectedSince.map { seconds(now.timeIntervalSince($0)) } ?? "null"),
                ("last_reading_at", s.lastReadingAt.map { quote(Self.iso($0)) } ?? "null"),
                ("last_reading_age_seconds", s.lastReadingAt.map { seconds(now.timeIntervalSince($0)) } ?? "null"),
                ("readings_written", "\(s.readingsWritten)"),
                ("readings_pending", "\(s.readingsPending)"),
                ("readings_dropped", "\(s.readingsDropped)"),
                ("readings_error", s.readingsError.map(quote) ?? "null"),
                ("reconnects", "\(s.reconnects)"),
                ("window_attempt", "\(s.windowAttempt)"),
                ("next_attempt_in_seconds", s.nextAttemptIn.map { seconds($0.inSeconds) } ?? "null"),
                ("last_error", s.lastError.map(quote) ?? "null"),
                ("silence_limit_seconds", s.silenceLimit.map { seconds($0.inSeconds) } ?? "null"),
                ("silence_events", "\(s.silenceEvents)"),
                ("last_disconnect_reason", s.lastDisconnectReason.map(quote) ?? "null"),
                ("last_disconnect_at", s.lastDisconnectAt.map { quote(Self.iso($0)) } ?? "null"),
                ("adapter_problem", s.adapterProblem.map(quote) ?? "null"),
                ("bond_problem", s.bondProblem.map(quote) ?? "null"),
                ("away_since", s.awaySince.map { quote(Self.iso($0)) } ?? "null"),
                ("bound_dongle", s.boundDongle.map(quote) ?? "null"),
                ("bootloader", s.bootloader.map(quote) ?? "null"),
                ("controller", s.controller.map(quote) ?? "null"),
                ("bluez_problem", s.bluezProblem.map(quote) ?? "null"),
            ]
        }
        fields.append(("forwarder", forwarderJSON()))
        return "{" + fields.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    private func forwarderJSON() -> String {
        guard let f = forwarder else { return "null" }
        let s = f.state
        let fields: [(String, String)] = [
            ("running", f.alive ? "true" : "false"),
            ("connected", s.map { f.alive && $0.connected ? "true" : "false" } ?? "null"),
            ("broker", s.map { quote($0.broker) } ?? "null"),
            // Dated back from now by its age (boot time, when of this boot):
            // in the wall clock's current frame, whatever step came since.
            ("since", s.map { quote(Self.iso(now.addingTimeInterval(-forwarderAge($0)))) } ?? "null"),
            ("acknowledged_seq", f.acknowledgedSeq.map { "\($0)" } ?? "null"),
            ("backlog", f.backlog.map { "\($0)" } ?? "null"),
            ("gap_records", s.map { "\($0.gapRecords)" } ?? "null"),
            ("undecodable_records", s.flatMap(\.undecodableRecords).map { "\($0)" } ?? "null"),
            ("last_error", s.flatMap(\.lastError).map(quote) ?? "null"),
            ("error", f.error.map(quote) ?? "null"),
        ]
        return "{" + fields.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    private func seconds(_ value: Double) -> String {
        FixedPoint.text(max(0, value), digits: 3)
    }

    /// A JSON string literal, escaped by Foundation's encoder.
    private func quote(_ text: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        guard let data = try? encoder.encode(text), let literal = String(data: data, encoding: .utf8) else {
            return "null"  // a String always encodes; this only keeps the output valid JSON
        }
        return literal
    }

    static func iso(_ date: Date) -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }

}

extension StatusReport.Daemon {
    /// Whether a process owns the daemon's bus name.
    var isRunning: Bool {
        if case .notRunning = self { return false }
        return true
    }

    var status: LinkStatus? {
        if case .answered(let status) = self { return status }
        return nil
    }
}
