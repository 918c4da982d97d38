/// The faults a seed injects, each with its timing and duration chosen by the
/// seed. Raw values are the names in the summary and the traces; the order of
/// the cases is the order they are printed in.
enum FaultKind: String, CaseIterable, Sendable {
    /// The link drops (supervision timeout, the dongle reset).
    case linkDrop = "link-drop"
    /// Every Connect fails, for a while, with one BlueZ error (each class
    /// `BlueZError.classify` knows: transient, needs-cancel, fatal, stale-object signs).
    case connectErrors = "connect-errors"
    /// A connect left pending in bluetoothd (by a killed client, or an HCI
    /// reset): every Connect says `InProgress` until a Disconnect cancels it.
    case inProgress = "in-progress"
    /// Connects and GATT write requests take long, often past their timeouts.
    case slowReplies = "slow-replies"
    /// bluetoothd crashes and is restarted; its sessions are gone.
    case bluetoothdCrash = "bluetoothd-crash"
    /// bluetoothd's main loop hangs: it keeps its name and answers nothing.
    case bluetoothdHang = "bluetoothd-hang"
    /// Someone powers the adapter off, later on again.
    case adapterPowerOff = "adapter-power-off"
    /// The controller is removed and comes back under another index (a USB replug).
    case controllerRenumbered = "controller-renumbered"
    /// The controller stops answering (`Powered` stays true) until a power cycle
    /// or an HCI reset (one in three: until an HCI reset; powering on fails).
    case controllerLockup = "controller-lockup"
    /// The vehicle is parked: the dongle stops advertising, its link drops;
    /// minutes or a night later it advertises again.
    case dongleAway = "dongle-away"
    /// The dongle's application hangs: the link stays, writes are answered, no notifications.
    case applicationHung = "application-hung"
    /// A firmware update moves the GATT objects while the link is up (Service Changed).
    case gattChanged = "gatt-changed"
    /// bluetoothd's object for the dongle is stale: Connect fails with
    /// le-connection-abort-by-local until Tether removes the object.
    case staleDevice = "stale-device"
    /// BlueZ's LE scan stops delivering advertisements while `Discovering`
    /// stays true, until discovery is started again (or, for some, until
    /// the controller is reset).
    case scanStall = "scan-stall"
    /// A busy street: many other devices advertise for a while.
    case busyStreet = "busy-street"
    /// A local user sends forged signals on the system bus: bluetoothd
    /// vanishing, notifications, the link dropping.
    case forgedSignals = "forged-signals"
    /// The system bus itself restarts (an upgrade of dbus): every
    /// connection closes; bluetoothd comes back on the new bus.
    case busRestart = "bus-restart"
    /// The readings disk is full (write returns ENOSPC, sometimes after a prefix).
    case diskFull = "disk-full"
    /// The readings disk fails (write returns EIO).
    case diskEIO = "disk-eio"
    /// write(2) writes only part of what it is given (it must be called again).
    case shortWrites = "short-writes"
    /// Tether is killed (SIGKILL) and restarted; a fresh daemon, the log recovered.
    case tetherKilled = "tether-killed"
    /// Tether is killed inside a write(2): a torn record at the log's end.
    case tetherKilledMidWrite = "tether-killed-mid-write"
    /// Tether is stopped (SIGTERM: it drains) and started again.
    case tetherRestarted = "tether-restarted"
    /// The wall clock jumps (NTP, an RTC-less boot): only the monotonic clock may matter.
    case wallClockJump = "wall-clock-jump"
    /// `tether reconnect`, over the bus, as an operator runs it.
    case reconnectRequest = "reconnect-request"
}

extension FaultKind {
    var index: Int { Self.indices[self] }
    private static let indices = IndexTable<FaultKind>()
}
