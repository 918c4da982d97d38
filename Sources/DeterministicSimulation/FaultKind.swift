/// The faults a seed injects, each with its timing and duration chosen by the
/// seed. Raw values are the names in the summary and the traces; the order of
/// the cases is the order they are printed in.
enum FaultKind: String, CaseIterable, Sendable {
    /// bluetoothd reports the link down (supervision timeout, the dongle reset).
    case linkDrop = "link-drop"
    /// Every Connect fails, for a while, with one BlueZ error (each class
    /// `BlueZError.classify` knows: transient, needs-cancel, fatal, stale-object signs).
    case connectErrors = "connect-errors"
    /// A connect stuck in bluetoothd (left by a killed client or an HCI
    /// reset): every Connect says `InProgress` until a Disconnect cancels it.
    case inProgress = "in-progress"
    /// Replies (Connect, StartNotify, WriteValue) take long, often past their timeouts.
    case slowReplies = "slow-replies"
    /// bluetoothd crashes and is restarted; its notify sessions are gone.
    case bluetoothdCrash = "bluetoothd-crash"
    /// Someone powers the adapter off, later on again.
    case adapterPowerOff = "adapter-power-off"
    /// The controller is removed and comes back under another index (a USB replug).
    case controllerRenumbered = "controller-renumbered"
    /// The dongle is out of reach: no advertising, connects fail, the link drops.
    case dongleAsleep = "dongle-asleep"
    /// The dongle's application hangs: the link stays, writes are answered, no notifications.
    case applicationHung = "application-hung"
    /// A firmware update moves the GATT objects while the link is up (Service Changed).
    case gattChanged = "gatt-changed"
    /// bluetoothd's object for the dongle is stale: Connect fails with
    /// le-connection-abort-by-local until Tether removes the object.
    case staleDevice = "stale-device"
    /// The readings disk is full (write returns ENOSPC, sometimes after a prefix).
    case diskFull = "disk-full"
    /// The readings disk fails (write returns EIO).
    case diskEIO = "disk-eio"
    /// write(2) writes only part of what it is given (it must be called again).
    case shortWrites = "short-writes"
    /// Tether is killed (SIGKILL) and restarted; a fresh supervisor, the log recovered.
    case tetherKilled = "tether-killed"
    /// Tether is killed inside a write(2): a torn record at the log's end.
    case tetherKilledMidWrite = "tether-killed-mid-write"
    /// Tether is stopped (SIGTERM: it drains) and started again.
    case tetherRestarted = "tether-restarted"
    /// The wall clock jumps (NTP, an RTC-less boot): only the monotonic clock may matter.
    case wallClockJump = "wall-clock-jump"
    /// `tether reconnect`.
    case reconnectRequest = "reconnect-request"
}
