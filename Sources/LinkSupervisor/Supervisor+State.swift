import LinkPolicy

extension Supervisor {
    /// Where the supervisor is, with exactly the data that place needs.
    ///
    /// Each case carries what is true only there: an operation in flight has
    /// its id only in the state that waits for it, a retry window exists only
    /// while attempts are being made, discovery runs only while searching or
    /// cooling down, the keep-alive and the silence references exist only
    /// while the link is up. Leaving a state drops its data, so nothing of an
    /// old attempt, session or escalation can leak into the next one.
    ///
    /// `SupervisorState` (public: logs, status, the control API) is this
    /// enum's name without the data; `awaitingDisconnect` shows as
    /// `backing-off`, since to an operator both are "waiting to try again".
    enum State: Sendable {
        /// bluetoothd is not on the bus.
        case waitingForBluez
        /// No usable adapter. `offByEscalation`: an escalation step left it
        /// powered off, so the supervisor powers it on again itself.
        case waitingForAdapter(offByEscalation: Bool)
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
        /// window of the attempt that got here stays open until data flows.
        case waitingForData(Session, window: Window, resubscribing: Bool)
        /// Subscribed, polled, and data flowing; up since `since`.
        case online(Session, since: Duration)
        /// Waiting out a backoff; the window's next attempt is due at `attemptAt`.
        case backingOff(Window, attemptAt: Duration)
        /// The link is being taken down (or was seen to go): waiting for
        /// bluetoothd to report it down before the next attempt.
        case awaitingDisconnect(DisconnectWait)
        /// An escalation step is running: after an exhausted window, or to
        /// recover an adapter that rfkill or a failed initialisation holds off.
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
            case .online: .online
            case .backingOff, .awaitingDisconnect: .backingOff
            case .escalating: .escalating
            case .coolingDown: .coolingDown
            // Listening is not yet a verdict: to an operator, waiting.
            case .away(let away): away.confirmed ? .away : .backingOff
            }
        }

        /// The retry window in force, if attempts are being made.
        var window: Window? {
            switch self {
            case .connecting(let setup, _), .resolving(let setup), .pairing(let setup, _), .subscribing(let setup, _):
                setup.window
            case .waitingForData(_, let window, _), .backingOff(let window, _): window
            case .awaitingDisconnect(let wait): wait.window
            case .waitingForBluez, .waitingForAdapter, .searching, .online, .escalating, .coolingDown, .away: nil
            }
        }

        /// The session of a link that is up (subscribed, polled, judged by
        /// the silence limit).
        var session: Session? {
            switch self {
            case .waitingForData(let session, _, _), .online(let session, _): session
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
                 .backingOff, .awaitingDisconnect, .escalating, .coolingDown, .away:
                nil
            }
        }

        /// Discovery, while searching, cooling down or away.
        var discovery: Discovery? {
            switch self {
            case .searching(let discovery, _): discovery
            case .coolingDown(let cooldown): cooldown.discovery
            case .away(let away): away.discovery
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .online, .backingOff, .awaitingDisconnect, .escalating:
                nil
            }
        }

        /// The scan watch of a wait on discovery: searching, or away once
        /// confirmed (the verdict's listening has its own deadline).
        var scanWatch: ScanWatch? {
            switch self {
            case .searching(_, let scan): scan
            case .away(let away): away.confirmed ? away.scan : nil
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .online, .backingOff, .awaitingDisconnect, .escalating, .coolingDown:
                nil
            }
        }

        /// Listening for the dongle with the controller checked at the
        /// search's pace (`searchCheck`): searching, or away.
        var waitsForAdvertisement: Bool {
            switch self {
            case .searching, .away: true
            case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
                 .online, .backingOff, .awaitingDisconnect, .escalating, .coolingDown:
                false
            }
        }

        /// Discovery was started and not stopped or failed since.
        var discovering: Bool { discovery?.running ?? false }
    }

    /// One retry window: its attempts are bounded by `window_attempts` and
    /// its time by `window`.
    struct Window: Sendable {
        var start: Duration
        var attempts = 0
        /// A single-shot window (after an escalation, or a cooldown's blind
        /// attempt): its first failure cools down, unless bluetoothd refused
        /// it for a connect stuck in it (needs-cancel: the attempt never went
        /// out), which gets one more try after the cancel.
        var blind = false
        /// The blind attempt was made again after cancelling a stuck connect.
        var retriedAfterCancel = false
        /// The controller was asked whether it answers, in this window.
        var controllerChecked = false
        /// Failed attempts whose error pointed at a stale device object.
        var staleFailures = 0
        var lastStaleError: String?
        /// Failed attempts that nobody answered (`LinkFailure.noAnswer`).
        var unanswered = 0
        /// Attempts the window started with: short sessions before it, each
        /// counted as a failed attempt (`Settings.stableLink`), not made.
        var flapped = 0
        /// Opened because the dongle was seen advertising: it is there, so
        /// connects that find nobody are a fault (a stale object, the radio),
        /// not its absence.
        var fromAdvertisement = false

        init(
            start: Duration, attempts: Int = 0, blind: Bool = false, controllerChecked: Bool = false,
            fromAdvertisement: Bool = false
        ) {
            self.start = start
            self.attempts = attempts
            self.blind = blind
            self.controllerChecked = controllerChecked
            self.fromAdvertisement = fromAdvertisement
        }
    }

    /// A link coming up: from the connect attempt until subscribed.
    struct LinkSetup: Sendable {
        var window: Window
        /// Connected=true was seen for this attempt (the Connect reply and the
        /// property change reach us by different paths, in either order).
        var connectedSeen: Bool
        /// The link stayed up while its GATT objects moved: coming online
        /// again is a re-subscription, not a reconnect.
        var resubscribing = false
        /// A notification already came (bluetoothd re-arms its notify
        /// sessions on reconnect, before we subscribe again).
        var lastDataAt: Duration?
        /// Device1.Pair succeeded on this link: no second one, whatever
        /// `Paired` says until its PropertiesChanged arrives.
        var paired = false
    }

    /// A link that is up: subscribed and polled.
    struct Session: Sendable {
        /// The silence timer's references: when the session was subscribed
        /// and the last notification.
        var subscribedAt: Duration
        var lastDataAt: Duration?
        /// The poll in flight (its operation id), judged by its deadline.
        var pollInFlight: Int?
        /// When the last poll that waits for an answer was sent; nil before
        /// the session's first poll.
        var lastConfirmedPollAt: Duration?
        var failedPolls = 0
    }

    /// Discovery while searching or cooling down: running, or failed to
    /// start and waiting for its retry timer.
    struct Discovery: Sendable {
        /// The StartDiscovery in force (operation `discovery`, whose failure
        /// `.discoveryFailed` answers); nil: stopped, or failed and waiting
        /// for its retry.
        var started: Int?
        var running: Bool { started != nil }
        /// StartDiscovery failures since searching or cooling down began:
        /// they pace its retries.
        var failures = 0
    }

    struct Cooldown: Sendable {
        var discovery: Discovery
        /// Since when discovery has listened in this cooldown, and when the
        /// dongle was last seen advertising.
        var listeningSince: Duration
        var lastAdvertisement: Duration?
        var blindAttemptAt: Duration
    }

    /// A long wait on discovery (searching, or away) watches the scan:
    /// once another device was heard, nobody heard for
    /// `Settings.scanStallAfter` means the scan has stalled (BlueZ #1126,
    /// #1554: `Discovering` stays true). Never heard (a quiet place):
    /// silence proves nothing, and the discovery session is only renewed
    /// now and then (`Settings.discoveryRenewal`).
    struct ScanWatch: Sendable {
        /// Another device was heard during this wait.
        var othersHeard = false
        /// Discovery restarts for a stall since others were last heard.
        var stallRestarts = 0
    }

    struct Away: Sendable {
        enum Phase: Sendable {
            /// The connects of `window` found nobody, and nothing shows yet
            /// whether the controller works: discovering and asking it, for
            /// `Settings.awayListen`. Nothing heard by then makes the window
            /// a fault after all (what a wedged controller gives).
            case listening(Window)
            /// Away: `evidence` shows that the controller works.
            case confirmed(evidence: String)
        }

        var phase: Phase
        var discovery: Discovery
        /// Since when it is away: when it was last seen (the link up, or an
        /// advertisement), else when Tether found it away.
        var since: Duration
        /// Whether the scan, once away, has stalled.
        var scan = ScanWatch()

        var confirmed: Bool { if case .confirmed = phase { true } else { false } }
    }

    struct Escalation: Sendable {
        enum Purpose: Sendable {
            /// A retry window was exhausted, or the controller did not
            /// answer: the link is what failed.
            case exhaustedWindow
            /// No usable adapter (an rfkill soft block, a controller that
            /// failed its initialisation): a recovery round.
            case adapterRecovery
        }

        var purpose: Purpose
        /// Why the steps run (an exhausted window, a controller that does
        /// not answer, …): every step's transition says it.
        var cause: String
        var step: EscalationStep
        /// The step's run (operation `escalate`), which its answer echoes.
        var run: Int
        var remaining: [EscalationStep]
        /// Someone asked for a reconnect while the step ran: the remaining
        /// steps are skipped and an attempt follows this one.
        var reconnectRequested = false
    }

    struct DisconnectWait: Sendable {
        var cause: String
        /// We asked for it (a forced reconnect): its confirmation is the
        /// expected disconnect. Otherwise the loss was reported when noticed.
        var requested: Bool
        /// The window of an attempt that never carried data, which goes on;
        /// nil after a link that was online (a new one opens).
        var window: Window?
    }

    /// What outlives every state: facts about the past that change how the
    /// next outage is handled, and counts.
    struct History: Sendable {
        /// The link was online at least once (a later online is a reconnect).
        var hasBeenOnline = false
        /// Online sessions in a row that ended sooner than `stableLink`.
        var shortSessions = 0
        /// The device object was removed since the link was last online: the
        /// next exhausted window escalates instead (one removal per outage).
        var removedStaleDevice = false
        /// bluetoothd has removed the dongle's object (it answered Tether's
        /// RemoveDevice, or a call on the object with `UnknownObject`) and
        /// the observation still shows it: its `InterfacesRemoved` comes after
        /// that reply. The dongle counts as unknown (searching, no connect on
        /// the gone object, which would only fail and cool down) until an
        /// observation without the object, an advertisement on it (it is
        /// back), or the next search check.
        var deviceObjectGone = false
        /// The last operation id handed out (every call that is answered).
        var operations = 0
        /// Adapter recovery rounds started since the adapter last stayed
        /// usable for `adapterRecoveryDelay`: they pace the next round, so a
        /// program that blocks the radio again as soon as Tether unblocks
        /// it meets one unblock per paced round, not a tug of war.
        var adapterRecoveries = 0
        /// Power-ons retried since an escalation last left the adapter off:
        /// they pace the next one (`powerOnRetry`, doubling).
        var powerOnRetries = 0
        /// Controller checks made while searching since the dongle was last
        /// found: they pace the next one (`searchControllerCheck`, doubling),
        /// and with it the escalations they lead to on a controller that
        /// stays wedged.
        var searchChecks = 0
        /// Since when the adapter is usable (nil while it is not).
        var adapterUsableSince: Duration?
        /// What became of a bond the dongle refused, since the link was last
        /// online: the bond is renewed (removed, paired again) once per
        /// outage, so a dongle that refuses every bond costs one removal and
        /// one pairing, not a loop of them.
        var bondLoss: BondLoss = .none
        /// Connects in a row that came up and dropped before services
        /// resolved, on a bonded device: the D-Bus-only sign of a refused
        /// bond where the kernel's reason cannot be heard.
        var dropsBeforeResolve = 0
        /// When the dongle was last seen: a link of it went down, or it
        /// advertised. Nil: not since Tether started.
        var lastSeen: Duration?
        /// The evidence that the controller works, for telling an absent
        /// dongle from a fault: when it last answered a controller check,
        /// and when another device was last heard advertising.
        var controllerAnsweredAt: Duration?
        var othersHeardAt: Duration?
    }

    enum BondLoss: Sendable, Equatable {
        case none
        /// Refused; its removal is asked for and not confirmed yet. No
        /// connect goes out while the device still holds the refused bond:
        /// each one is refused again (and on Debian 12's kernel each refusal
        /// has oopsed the kernel and killed bluetoothd in `make e2e`), so the
        /// attempts of the window ask for the removal instead until it is done.
        case removing
        /// Removed to pair again, in this outage.
        case renewed
        /// Reported, and not renewed (already renewed, or Tether does not
        /// pair): the windows go straight to cooling down, one blind attempt
        /// per cooldown, since every connect is refused. `problem`: what an
        /// operator must do (`Status.bondProblem`).
        case reported(problem: String)
    }

    /// Effects asked for and not yet answered, whatever the state: the
    /// timers armed (a fire of any other is stale), a RemoveDevice in
    /// flight (its id), a controller check (its id), and a reconnect
    /// request waiting for its answer.
    struct Outstanding: Sendable {
        var timers: Set<SupervisorTimer> = []
        var removal: Int?
        var reconnectAnswer = false
        /// A `.checkController` not answered yet.
        var controllerCheck: Int?
    }
}
