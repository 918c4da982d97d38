/// Where the supervisor is in keeping the link up. Raw values are the names
/// used in logs, `tether status` and the control API.
public enum SupervisorState: String, Sendable, CaseIterable {
    /// bluetoothd is not on the bus.
    case waitingForBluez = "waiting-for-bluez"
    /// No adapter, or it is powered off: no connect attempts until it is on.
    case waitingForAdapter = "waiting-for-adapter"
    /// The dongle's Device1 object is unknown: discovering to find it.
    case searching
    /// A Connect call is in flight.
    case connecting
    /// Connected; waiting for ServicesResolved and the characteristics.
    case resolving
    /// Device1.Pair: the dongle holds no bond and the config says Tether
    /// pairs (`dongle.pairing`).
    case pairing
    /// StartNotify on the notify characteristics.
    case subscribing
    /// Subscribed and polled by the keep-alive, but no notification has
    /// arrived in this session yet (only with a silence limit): the attempt
    /// that got here is not proven until data flows, so its retry window
    /// stays open and silence for the limit counts as a failed attempt.
    case waitingForData = "waiting-for-data"
    /// Subscribed, polled by the keep-alive, and notifications flowing: the
    /// last one came less than the silence limit ago (when there is one).
    case online
    /// Waiting out a backoff before the next attempt of the window.
    case backingOff = "backing-off"
    /// Running an escalation step (adapter power cycle, HCI reset).
    case escalating
    /// The window is exhausted: discovering, connecting as soon as the dongle
    /// advertises, with a blind attempt every `cooldown`.
    case coolingDown = "cooling-down"
    /// The dongle is away (a parked vehicle): connects found nobody while the
    /// controller demonstrably works. Discovering, connecting as soon as the
    /// dongle advertises; no escalation, no blind attempts.
    case away
}
