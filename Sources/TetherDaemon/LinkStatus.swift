import Configuration
import Foundation
import LinkSupervisor

/// A snapshot of one `LinkService`, for the control API, `STATUS=` and tests.
public struct LinkStatus: Sendable, Equatable {
    public var state: SupervisorState
    public var device: String?
    public var adapter: String?
    public var connectedSince: Date?
    public var lastReadingAt: Date?
    public var readingsWritten: UInt64
    public var reconnects: Int
    public var windowAttempt: Int
    public var nextAttemptIn: Duration?
    public var lastError: String?

    public init(
        state: SupervisorState, device: String? = nil, adapter: String? = nil, connectedSince: Date? = nil,
        lastReadingAt: Date? = nil, readingsWritten: UInt64 = 0, reconnects: Int = 0, windowAttempt: Int = 0,
        nextAttemptIn: Duration? = nil, lastError: String? = nil
    ) {
        self.state = state
        self.device = device
        self.adapter = adapter
        self.connectedSince = connectedSince
        self.lastReadingAt = lastReadingAt
        self.readingsWritten = readingsWritten
        self.reconnects = reconnects
        self.windowAttempt = windowAttempt
        self.nextAttemptIn = nextAttemptIn
        self.lastError = lastError
    }

    /// One line for systemd's `STATUS=` (shown by `systemctl status`).
    public func summary(now: Date = Date()) -> String {
        var text = state.rawValue
        if let device { text += " \(device)" }
        switch state {
        case .online:
            if let lastReadingAt {
                text += ", last reading \(Self.age(now.timeIntervalSince(lastReadingAt))) ago"
            } else {
                text += ", no reading yet"
            }
        case .backingOff, .coolingDown:
            if let nextAttemptIn {
                text += ", next attempt in \(DurationText.rounded(nextAttemptIn))"
            }
            if let lastError { text += ", last error: \(lastError)" }
        case .connecting where windowAttempt > 0:
            text += ", attempt \(windowAttempt)"
        default:
            break
        }
        return text
    }

    /// Whole seconds up to a minute, then minutes: a status line, not a measurement.
    static func age(_ seconds: TimeInterval) -> String {
        let s = max(0, Int(seconds.rounded()))
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m\(s % 60 == 0 ? "" : "\(s % 60)s")" }
        return "\(s / 3600)h\(s % 3600 / 60 == 0 ? "" : "\(s % 3600 / 60)m")"
    }
}

/// A change worth publishing: a new state, attempt, error, or schedule.
public struct LinkStatusChange: Sendable {
    public var status: LinkStatus
    /// The transition that caused it, if the state changed.
    public var transition: (from: SupervisorState, to: SupervisorState, cause: String)?
}

/// What `LinkService.reconnect` achieved by the time it returned.
public enum ReconnectOutcome: Sendable, Equatable {
    /// A connect attempt is under way (the number is its place in the new window).
    case started(attempt: Int)
    /// Nothing to connect with: bluetoothd or the adapter is missing; says which.
    case notReady(String)
    /// Accepted, but no attempt started within the wait (an escalation step
    /// or a forced disconnect is still running); the state it is in.
    case pending(SupervisorState)
}
