import BlueZ
import LinkSupervisor

/// The model of bluetoothd, the adapter and the dongle: what a real stack
/// would show Tether through D-Bus, reduced to the facts the adapter layer
/// distils into a `LinkObservation`, plus what the model needs to answer
/// calls (pending connects, notify sessions, the dongle's idle clock).
///
/// Invariants:
/// - the link is up only with bluetoothd running and the adapter present and powered;
/// - services are resolved and characteristics exported only on a link that is up;
/// - a notify session (StartNotify) belongs to one Tether process: it ends
///   with that process, with bluetoothd, and when the GATT objects move.
struct World {
    var bluezUp = true
    var adapterPresent = true
    var adapterPowered = true
    /// The controller's index (hciN); a renumbering changes it.
    var adapterIndex = 0
    /// bluetoothd has a Device1 object for the dongle.
    var deviceObject = true
    /// bluetoothd removed the device object and answered the RemoveDevice,
    /// and its InterfacesRemoved has not gone out yet (BlueZ sends it from an
    /// idle callback, after the reply): Tether's view still lists the object.
    var removalUnsignalled = false
    var connected = false
    var servicesResolved = false
    /// The characteristics Tether needs are exported (false for a moment after the GATT layout changed).
    var characteristicsReady = false
    /// The current Tether process holds a notify session on the notify characteristic.
    var notifySession = false
    /// The current Tether process has discovery running.
    var discovering = false
    /// A Connect of Tether's that bluetoothd has not answered: its id, its process.
    var pendingConnect: (id: Int, incarnation: Int, token: UInt64)?
    /// A connect pending in bluetoothd that no current client asked for: Connect says InProgress.
    var stuckConnect = false
    /// bluetoothd's object for the dongle is stale: Connect fails, abort-by-local, until it is removed.
    var staleObject = false
    /// The connect-errors fault: every Connect fails with this.
    var connectError: BlueZError?
    var slowReplies = false
    /// The dongle is out of reach (the fault), or fell asleep for want of keep-alives (a bug: then for good).
    var dongleAway = false
    var dongleFellAsleep = false
    var applicationHung = false
    /// When the dongle last heard from the central (a write, the connect).
    var dongleLastHeard: Duration = .zero
    var gattGeneration = 0

    var adapterUsable: Bool { bluezUp && adapterPresent && adapterPowered }
    var dongleReachable: Bool { !dongleAway && !dongleFellAsleep }

    /// What the adapter layer would distil from bluetoothd's object tree now.
    var observation: LinkObservation {
        guard bluezUp else { return LinkObservation() }
        return LinkObservation(
            bluezPresent: true, adapterPresent: adapterPresent, adapterPowered: adapterPresent && adapterPowered,
            devicePresent: adapterPresent && (deviceObject || removalUnsignalled), connected: connected, servicesResolved: servicesResolved,
            characteristicsReady: servicesResolved && characteristicsReady
        )
    }

    /// The link is gone (by whatever cause); notify sessions survive a link
    /// loss in bluetoothd (it re-arms them on the next connect).
    mutating func dropLink() {
        connected = false
        servicesResolved = false
        characteristicsReady = false
    }
}
