import LinkPolicy

extension Supervisor {
    /// Where the supervisor is, with exactly the data that place needs.
    ///
    /// Online, or in an outage: from the link's loss (or Tether's start) to
    /// the next time it is online. An outage carries its own facts
    /// (`Outage`: a stale object removed, a bond refused, a RemoveDevice or a
    /// controller check in flight, …) through every step of its recovery
    /// (`Recovery`); going online drops them, so nothing of one outage, and
    /// no late answer to it, acts on the next. Within the outage each step
    /// carries what is true only there: an operation in flight has its id
    /// only in the state that waits for it, a retry window exists only while
    /// attempts are being made, discovery runs only while searching, cooling
    /// down or away, the keep-alive and the silence references exist only
    /// while the link is up (`Session`, which cannot be made without arming
    /// its keep-alive). Leaving a state drops its data.
    ///
    /// `SupervisorState` (public: logs, status, the control API) is this
    /// enum's name without the data; `awaitingDisconnect` shows as
    /// `backing-off`, since to an operator both are "waiting to try again".
    enum State: Sendable {
        /// Subscribed, polled, and data flowing; up since `since`.
        case online(Session, since: Duration)
        /// Not online: `Recovery` says where the recovery stands.
        case outage(Outage, Recovery)

        var name: SupervisorState {
            switch self {
            case .online: .online
            case .outage(_, let recovery): recovery.name
            }
        }

        /// The outage's facts, nil while online. Set in place
        /// (`current.outage?.bondLoss = …`): while online that changes
        /// nothing, as there is no outage to change.
        var outage: Outage? {
            get {
                switch self {
                case .online: nil
                case .outage(let outage, _): outage
                }
            }
            set {
                guard let newValue, case .outage(_, let recovery) = self else { return }
                self = .outage(newValue, recovery)
            }
        }

        /// The retry window in force, if attempts are being made.
        var window: Window? {
            switch self {
            case .online: nil
            case .outage(_, let recovery): recovery.window
            }
        }

        /// The session of a link that is up (subscribed, polled, judged by
        /// the silence limit).
        var session: Session? {
            switch self {
            case .online(let session, _): session
            case .outage(_, let recovery): recovery.session
            }
        }

        /// Discovery, while searching, cooling down or away.
        var discovery: Discovery? {
            switch self {
            case .online: nil
            case .outage(_, let recovery): recovery.discovery
            }
        }

        /// The scan watch of a wait on discovery: searching, or away once
        /// confirmed (the verdict's listening has its own deadline).
        var scanWatch: ScanWatch? {
            switch self {
            case .online: nil
            case .outage(_, let recovery): recovery.scanWatch
            }
        }

        /// Listening for the dongle with the controller checked at the
        /// search's pace (`searchCheck`): searching, or away.
        var waitsForAdvertisement: Bool {
            switch self {
            case .online: false
            case .outage(_, let recovery): recovery.waitsForAdvertisement
            }
        }

        /// Discovery was started and not stopped or failed since.
        var discovering: Bool { discovery?.running ?? false }
    }

    /// Where the recovery of an outage stands.
    enum Recovery: Sendable {
        /// bluetoothd is not on the bus.
        case waitingForBluez
        /// No usable adapter. `powerOnRetries`: nil, or an escalation step
        /// left it powered off, so the supervisor powers it on again itself,
        /// and has retried that this many times (they pace the next,
        /// `Settings.powerOnRetry` doubling).
        case waitingForAdapter(powerOnRetries: Int?)
        /// The dongle's device object is unknown: discovering.
        case searching(Discovery, scan: ScanWatch)
        /// A Connect call (operation `connect`) is in flight.
        case connecting(LinkSetup, connect: Int)
        /// Connected; waiting for ServicesResolved and the characteristics.
        case resolving(LinkSetup)
        /// Device1.Pair (operation `pair`) is in flight: the dongle holds no
        /// bond and Tether pairs (`Settings.pairs`).
        case pairing(LinkSetup, pair: Int)
        /// StartNotify (operation `subscribe`) is in flight.
        case subscribing(LinkSetup, subscribe: Int)
        /// Subscribed and polled; no notification yet in this session. The
        /// window of the attempt that got here stays open until data flows,
        /// and so does the outage.
        case waitingForData(Session, window: Window, resubscribing: Bool)
        /// Waiting out a backoff; the window's next attempt is due at `attemptAt`.
        case backingOff(Window, attemptAt: Duration)
        /// The link is being taken down (or was seen to go): waiting for
        /// bluetoothd to report it down before the next attempt.
        case awaitingDisconnect(DisconnectWait)
        /// An escalation step (operation `run`) is running: after an
        /// exhausted window, or to recover an adapter that rfkill or a failed
        /// initialisation holds off.
        case escalating(Escalation)
        /// The window is exhausted: discovering, connecting when the dongle
        /// advertises after a silence, one blind attempt at `blindAttemptAt`.
        case coolingDown(Cooldown)
        /// The dongle is away and the controller works: discovering,
        /// connecting as soon as the dongle advertises; controller checks at
        /// the search's pace (an unanswered one escalates). Or, before that
        /// is known, listening for the evidence (`Away.Phase`).
        case away(Away)

        var name: SupervisorState {
            switch self {
            case .waitingForBluez: .waitingForBluez
            case .waitingForAdapter: .waitingForAdapter
            case .searching: .searching
            case .connecting: .connecting
            case .resolving: .resolving
            case .pairing: .pairing
            case .subscribing: .subscribing
            case .waitingForData: .waitingForData
            case .backingOff, .awaitingDisconnect: .backingOff
            case .escalating: .escalating
            case .coolingDown: .coolingDown
            // Listening is not yet a verdict: to an operator, waiting.
            case .away(let away): away.confirmed ? .away : .backingOff
            }
        }

        var window: Window? {
            switch self {
            case .connecting(let setup, _), .resolving(let setup), .pairing(let setup, _), .subscribing(let setup, _):
                setup.window
            case .waitingForData(_, let window, _), .backingOff(let window, _): window
            case .awaitingDisconnect(let wait): wait.window
            case .waitingForBluez, .waitingForAdapter, .searching, .escalating, .coolingDown, .away: nil
            }
        }

        var session: Session? {
            switch self {
            case .waitingForData(let session, _, _): session
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
                 .backingOff, .awaitingDisconnect, .escalating, .coolingDown, .away:
                nil
            }
        }

        var discovery: Discovery? {
            switch self {
            case .searching(let discovery, _): discovery
            case .coolingDown(let cooldown): cooldown.discovery
            case .away(let away): away.discovery
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .backingOff, .awaitingDisconnect, .escalating:
                nil
            }
        }

        var scanWatch: ScanWatch? {
            switch self {
            case .searching(_, let scan): scan
            case .away(let away): away.confirmed ? away.scan : nil
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .backingOff, .awaitingDisconnect, .escalating, .coolingDown:
                nil
            }
        }

        var waitsForAdvertisement: Bool {
            switch self {
            case .searching, .away: true
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .backingOff, .awaitingDisconnect, .escalating, .coolingDown:
                false
            }
        }
    }
}
