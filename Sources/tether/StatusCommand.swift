import ArgumentParser
import Configuration
import Foundation
import TetherDaemon

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the daemon's state: link, device, last reading, reconnects, retry window.",
        discussion: """
            Reads the properties of io.tether.Tether1 on the system bus (anyone may). With --json, prints \
            one JSON object with stable keys: instance, running, state, device, adapter, connected_since, \
            connected_for_seconds, last_reading_at, last_reading_age_seconds, readings_written, reconnects, \
            window_attempt, next_attempt_in_seconds, last_error (times in UTC ISO 8601; null when not applicable). \
            Exit status: 0 when running, 3 when the daemon is not running, 1 on other errors.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() async throws {
        let instance = try instanceOptions.resolved()
        let client = await ControlConnection.connect(instance)
        let status: LinkStatus
        do {
            status = try await client.status()
        } catch {
            if json, case .notRunning = error {
                print(StatusReport.notRunning(instance: instance).json())
            }
            ControlConnection.exit(error)
        }
        let report = StatusReport(instance: instance, status: status, now: Date())
        print(json ? report.json() : report.text())
    }
}

/// What `tether status` prints, in both of its forms.
struct StatusReport {
    var instance: InstanceName
    var status: LinkStatus?
    var now: Date

    static func notRunning(instance: InstanceName) -> StatusReport {
        StatusReport(instance: instance, status: nil, now: Date())
    }

    func text() -> String {
        guard let s = status else { return "tether (\(instance)): not running" }
        var lines = ["tether (\(instance)): \(s.state.rawValue)"]
        func row(_ label: String, _ value: String) {
            lines.append("  " + label.padding(toLength: 14, withPad: " ", startingAt: 0) + value)
        }
        row("device", (s.device ?? "not found yet") + (s.adapter.map { " via \($0)" } ?? ""))
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
        row("reconnects", "\(s.reconnects)")
        if s.windowAttempt > 0 || s.nextAttemptIn != nil {
            var window = s.windowAttempt > 0 ? "attempt \(s.windowAttempt)" : "no attempt yet"
            if let next = s.nextAttemptIn { window += ", next in \(DurationText.rounded(next))" }
            row("retry window", window)
        } else {
            row("retry window", "none")
        }
        if let error = s.lastError { row("last error", error) }
        return lines.joined(separator: "\n")
    }

    /// Keys are fixed and always present (null when not applicable), so that
    /// scripts can rely on them; new keys may be added, none renamed.
    func json() -> String {
        var fields: [(String, String)] = [("instance", quote(instance.description)), ("running", status == nil ? "false" : "true")]
        if let s = status {
            fields += [
                ("state", quote(s.state.rawValue)),
                ("device", s.device.map(quote) ?? "null"),
                ("adapter", s.adapter.map(quote) ?? "null"),
                ("connected_since", s.connectedSince.map { quote(Self.iso($0)) } ?? "null"),
                ("connected_for_seconds", s.connectedSince.map { seconds(now.timeIntervalSince($0)) } ?? "null"),
                ("last_reading_at", s.lastReadingAt.map { quote(Self.iso($0)) } ?? "null"),
                ("last_reading_age_seconds", s.lastReadingAt.map { seconds(now.timeIntervalSince($0)) } ?? "null"),
                ("readings_written", "\(s.readingsWritten)"),
                ("reconnects", "\(s.reconnects)"),
                ("window_attempt", "\(s.windowAttempt)"),
                ("next_attempt_in_seconds", s.nextAttemptIn.map { seconds(Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18) } ?? "null"),
                ("last_error", s.lastError.map(quote) ?? "null"),
            ]
        }
        return "{" + fields.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    private func seconds(_ value: Double) -> String {
        String(format: "%.3f", max(0, value))
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
