/// What the supervisor knows of the world, distilled from bluetoothd's object
/// tree by the adapter layer. The supervisor compares each observation with
/// the previous one, so events such as "the link dropped" are derived from
/// state and cannot be missed or double-counted.
public struct LinkObservation: Sendable, Equatable {
    public var bluezPresent = false
    /// bluetoothd answers on the bus. False while it owns its name but its
    /// main loop does not answer (a D-Bus ping unanswered): hung, not gone.
    /// Nothing reaches the dongle through it then, so it counts as away.
    public var bluezAnswering = true
    public var adapterPresent = false
    public var adapterPowered = false
    /// The dongle's Device1 object exists.
    public var devicePresent = false
    public var connected = false
    public var servicesResolved = false
    /// Every characteristic the daemon needs is exported (ServicesResolved can
    /// come before the GATT objects).
    public var characteristicsReady = false
    /// Why the characteristics are not ready while services are resolved, in
    /// words for the log and status: which UUIDs the dongle lacks and what it
    /// exposes instead (a firmware update can move or drop them).
    public var gattProblem: String?
    /// The dongle's device object holds a bond (Paired or Bonded): removing
    /// it would throw the keys away.
    public var deviceBonded = false
    /// rfkill holds the adapter's controller off (the kernel powers a
    /// blocked controller down; bluetoothd shows `Powered=false` soon after,
    /// and powers it on again itself once the block lifts).
    public var radioBlock: RadioBlock = .none
    /// No adapter, but the kernel has the configured controller and it failed
    /// its initialisation (bluetoothd never hears of such a controller; only
    /// a re-probe, a USB reset or rebind, brings it back).
    public var controllerFailed = false
    /// The kernel tells why links end (its management socket, with
    /// CAP_NET_ADMIN): a dongle that refuses its bond then shows as an
    /// authentication failure (`.bondRejected`), so links that drop before
    /// services resolve are radio trouble, not a sign of a refused bond.
    public var disconnectReasonsHeard = false

    public init(
        bluezPresent: Bool = false, adapterPresent: Bool = false, adapterPowered: Bool = false,
        devicePresent: Bool = false, connected: Bool = false, servicesResolved: Bool = false,
        characteristicsReady: Bool = false
    ) {
        self.bluezPresent = bluezPresent
        self.adapterPresent = adapterPresent
        self.adapterPowered = adapterPowered
        self.devicePresent = devicePresent
        self.connected = connected
        self.servicesResolved = servicesResolved
        self.characteristicsReady = characteristicsReady
    }

    var adapterUsable: Bool { bluezReachable && adapterPresent && adapterPowered && radioBlock == .none }
    /// bluetoothd is on the bus and answers.
    var bluezReachable: Bool { bluezPresent && bluezAnswering }
    #if DST_BUG_LINK_READY_IGNORES_GATT  // planted bug (make dst-selftest): subscribes before the characteristics exist
    var linkReady: Bool { connected && servicesResolved }
    #else
    var linkReady: Bool { connected && servicesResolved && characteristicsReady }
    #endif
}

/// An rfkill block on the adapter's controller.
public enum RadioBlock: String, Sendable, Equatable {
    case none
    /// Set in software (`rfkill block`, a desktop's airplane mode): software can clear it.
    case soft
    /// A hardware switch or the firmware: only that can clear it.
    case hard
}
