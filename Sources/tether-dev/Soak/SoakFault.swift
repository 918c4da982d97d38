/// The faults the soak injects, one at a time, at random.
enum SoakFault: String, CaseIterable, Sendable {
    case drop
    case failingConnects = "failing-connects"
    case inProgress = "in-progress"
    case bluezCrash = "bluez-crash"
    case bluezRestart = "bluez-restart"
    /// bluetoothd's main loop hangs for 1.5–4 s (it keeps its name, answers
    /// nothing, then serves what queued): short of Tether's verdict (a call
    /// unanswered, then a ping unanswered for 3 s) and of the dongle's idle
    /// sleep, so nothing may be lost and Tether must be online after it.
    case bluezHang = "bluez-hang"
    case adapterOff = "adapter-off"
    case latencySpike = "latency-spike"
    case killDaemon = "kill-9"
    case diskFull = "disk-full"
    /// The dongle's application hangs while its radio keeps the link: no
    /// notifications, writes accepted; its ATT answers or not. Tether must
    /// drop the silent link within the silence limit.
    case hungApplication = "hung-application"
    /// A firmware update moves the GATT handles while the link is up
    /// (Service Changed): readings must go on without a drop.
    case gattChanged = "gatt-changed"
    /// bluetoothd's device object goes stale: connects fail with
    /// le-connection-abort-by-local until Tether removes it.
    case staleDevice = "stale-device"
    /// The controller leaves and comes back under the other index (a USB
    /// reset): Tether follows it by address.
    case adapterRenumbered = "adapter-renumbered"
    /// rfkill soft-blocks the controller (airplane mode): the adapter goes
    /// off; Tether, with `rfkill-unblock`, clears it at once by itself.
    case rfkillSoft = "rfkill-soft"
    /// A soft block that something keeps putting back (a desktop's airplane
    /// mode): re-blocked as soon as Tether clears it, so Tether waits (its
    /// next round is 30 s away: no loop) until the soak lifts it seconds later.
    case rfkillSoftHeld = "rfkill-soft-held"
    /// A brief hard block (a switch): waited out, no unblock, no attempt.
    case rfkillHard = "rfkill-hard"
    /// The controller locks up (Powered still true, calls failing or
    /// hanging, no notifications): Tether's window runs out and its
    /// `power-cycle` step clears it.
    case lockup
    /// The dongle forgets its keys (a factory reset) and drops the link:
    /// bluetoothd keeps the bond it refuses, every connect drops at once;
    /// Tether removes the bond and pairs again (the soak's dongle needs an
    /// encrypted link, and Tether pairs Just Works).
    case bondLost = "bond-lost"
    /// The vehicle parks: the dongle stops advertising (the link drops) for
    /// longer than a retry window, while other devices advertise nearby, and
    /// then comes back. Tether must find it away (no controller step, no
    /// window exhaustion), and be online within 2 s of its return.
    case parked
    /// The dongle's firmware is updated: its Nordic DFU bootloader
    /// advertises as DfuTarg at the address plus one (the link drops) for
    /// 40–55 s (past the retry window, after which Tether scans), then the
    /// updated dongle advertises. Tether must say so, never
    /// connect to the bootloader, take no controller step, and be online
    /// after.
    case firmwareUpdate = "firmware-update"

    /// Reasons a link drops with (the simulator passes them to the log).
    static let dropReasons = ["timeout", "remote", "local", "link-loss"]

    /// Connect failures as BlueZ reports them, one of each classification:
    /// transient, needs-cancel (Failed "Operation already in progress", as
    /// bluetoothd 5.66 said in the e2e tests; InProgress is a fault of its
    /// own), not ready.
    static let connectErrors: [(name: String, message: String)] = [
        ("org.bluez.Error.Failed", "le-connection-abort-by-local"),
        ("org.bluez.Error.Failed", "Operation already in progress"),
        ("org.bluez.Error.Failed", "Software caused connection abort"),
        ("org.bluez.Error.Failed", "Host is down"),
        ("org.bluez.Error.NotReady", "Resource Not Ready"),
        ("org.freedesktop.DBus.Error.NoReply", "Did not receive a reply"),
    ]
}
