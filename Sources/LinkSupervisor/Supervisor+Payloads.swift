import LinkPolicy

/// The payloads of the states: each is carried only by the states it
/// belongs to (`State`, `Recovery`), and goes with them.
extension Supervisor {
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
        /// When this attempt began (its Connect, or the re-subscription).
        var attemptStartedAt: Duration
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
        /// Armed as the session is made: there is no other way to get one
        /// (`KeepAlive`, `startKeepAlive`).
        var keepAlive: KeepAlive
    }

    /// Discovery while searching or cooling down: running, or failed to
    /// start and waiting for its retry timer.
    struct Discovery: Sendable {
        /// The StartDiscovery in force (operation `discovery`, whose failure
        /// `.discoveryFailed` answers); nil: stopped, or failed and waiting
        /// for its retry.
        var started: Int?
        var running: Bool { started != nil }
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
            ///
            /// Evidence that comes sooner than `Settings.awayVerdictAfter`
            /// after listening began is kept (`evidence`) and decides only
            /// then: a dongle that is there advertises within that time,
            /// and its advertisement makes the window a fault after all.
            case listening(Window, since: Duration, evidence: String?)
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

        enum Phase: Sendable, Equatable {
            /// The steps wait for the answer to the controller check in
            /// flight (operation `check`): it decides whether the power
            /// cycle, which goes through that very controller, runs. A window
            /// can be exhausted while the check a silence or its failures
            /// asked for is still out (`make e2e`'s uart-lockup once: every
            /// connect on the wedged controller failed within its 5 s).
            case awaitingControllerCheck(check: Int)
            /// `step` runs as operation `run`, which its answer echoes.
            case running(EscalationStep, run: Int)
        }

        var purpose: Purpose
        /// Why the steps run (an exhausted window, a controller that does
        /// not answer, …): every step's transition says it.
        var cause: String
        var phase: Phase
        /// The steps after the running one; while awaiting the check, all
        /// of them.
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
}
