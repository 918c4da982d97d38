import ControlAPI

/// What the control interface needs of a link: its status and a way to
/// force a reconnect. `LinkService` is one; tests can supply another.
public protocol ControlledLink: Sendable {
    var status: LinkStatus { get }
    func reconnect(waitingUpTo limit: Duration) async -> ReconnectOutcome
    /// Forgets the dongle this gateway is bound to, then reconnects.
    func rebind(waitingUpTo limit: Duration) async -> RebindOutcome
    /// Calls `reply` once the link's loop is free to; see `LinkService.ping`.
    func ping(_ reply: @escaping @Sendable () -> Void)
    /// The wall clock was stepped; see `LinkService.clockWasSet`.
    func clockWasSet()
}

extension LinkService: ControlledLink {}
