import ControlAPI
import LinkSupervisor

/// A change worth publishing: a new state, attempt, error, or schedule.
public struct LinkStatusChange: Sendable {
    public var status: LinkStatus
    /// The transition that caused it, if the state changed.
    public var transition: (from: SupervisorState, to: SupervisorState, cause: String)?
}

/// What `LinkService.rebind` did.
public enum RebindOutcome: Sendable, Equatable {
    /// The binding (to this address; nil: there was none) is forgotten, and
    /// the reconnect that follows went so far.
    case forgotten(String?, ReconnectOutcome)
    /// The config names the dongle's address: that is its binding.
    case fixedByConfig(String)
    /// The binding file could not be removed.
    case failed(String)
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
