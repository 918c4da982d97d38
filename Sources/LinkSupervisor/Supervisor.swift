import LinkPolicy
import Pacing

/// The supervisor: keeps the dongle connected, subscribed and polled.
///
/// Pure logic with no I/O and no clock of its own: the adapter layer feeds it
/// events together with the current monotonic time, and carries out the
/// actions it returns (calls to BlueZ, timers). Unit tests and `make dst`
/// drive it on a virtual clock.
///
/// In swift-nio's style: one `State` enum whose cases carry the data each
/// state needs (Supervisor+State.swift), one function per input. Beside it
/// there are only the settings, the last observation of the world (an
/// input), counts and facts about the past (`History`), and the effects
/// asked for and not yet answered (`Outstanding`: armed timers, a
/// RemoveDevice, a reconnect request's answer).
///
/// Invariants:
/// - at most one connect, one subscribe and one poll are in flight, each
///   tagged with an id held only by the state that waits for it; results
///   for anything else are stale and ignored;
/// - on a link that is up, the first poll and then one at least every
///   `keepaliveConfirmEvery` wait for bluetoothd's answer (all of them when
///   it is nil); the polls in between ask for none and are never in flight;
/// - no connect attempt is made while bluetoothd is away or the adapter off,
///   nor on a device object bluetoothd has said is gone (removed at
///   Tether's request, or answered `UnknownObject`) while the observation
///   still lists it: that is searching;
/// - a retry window never exceeds `windowAttempts` attempts nor `window` time,
///   and an exhausted window always leads to cooling down, an escalation or
///   away (discovering, with controller checks at the search's pace), never
///   to silence;
/// - away is entered only from a window whose every attempt found nobody,
///   not opened by an advertisement of the dongle, beside evidence that the
///   controller works (it answered a check, or others were heard, since the
///   window began); it escalates only on evidence against the controller;
/// - while the adapter is unusable, recovery steps run in rounds at least
///   `adapterRecoveryDelay` apart (doubling to its cap) after the first,
///   never while rfkill's hard block lasts;
/// - a search is never left to itself: the controller is asked whether it
///   answers `searchControllerCheck` into it, then at doubling intervals up
///   to `adapterRecoveryDelayCap`, until the dongle is found;
/// - every state change comes with a `.transition` action naming its cause;
///   the keep-alive's own steps change `status` only with a transition or a
///   report (`leavesStatusAsItWas`, which the daemon relies on);
/// - with a silence limit, `online` means data flows: it is entered with the
///   first notification of a session and left once none came for the limit;
///   the retry window of the attempt that brought the link up stays open
///   until then, so a link that never carries data is a failed attempt.
public struct Supervisor: Sendable {
    public struct Settings: Sendable, Equatable {
        public var policy: ReconnectPolicy
        public var keepaliveEnabled: Bool
        public var keepaliveInterval: Duration
        public var keepaliveTimeout: Duration
        /// At least this long between polls that wait for bluetoothd's
        /// answer; the polls in between are sent without asking for one
        /// (`.pollWithoutReply`). Nil: every poll waits. Only for a write
        /// command, whose answer says no more than that bluetoothd runs and
        /// took the write: the dongle answers a command with nothing. An
        /// answer costs the daemon a second wake-up per poll, and a
        /// keep-alive every second is its whole idle load. The first poll of
        /// a link waits, so a write that bluetoothd refuses shows at once.
        public var keepaliveConfirmEvery: Duration?
        public var escalation: [EscalationStep]
        /// Failed link checks in a row that force a reconnect.
        public var failedPollsBeforeReconnect = 2
        /// While cooling down, the dongle counts as having woken up (and a
        /// fresh window opens) only when it advertises after this long
        /// without being seen. A dongle that advertises all along but refuses
        /// connections gets one blind attempt per cooldown, not an endless
        /// series of windows.
        public var advertisingSilence: Duration = .seconds(5)
        /// A link that drops sooner than this after coming online counts as
        /// flapping: each such drop in a row counts as a failed attempt of
        /// the next window, so a dongle that connects and drops at once backs
        /// off and, in the end, escalates and cools down like any failure.
        public var stableLink: Duration = .seconds(10)
        /// Wait before trying discovery again after it failed to start; it
        /// doubles with each failure in a row, up to `discoveryRetryCap`.
        public var discoveryRetry: Duration = .seconds(5)
        public var discoveryRetryCap: Duration = .seconds(60)
        /// While searching, the controller is asked whether it answers after
        /// this long without finding the dongle, then after twice as long
        /// each time, up to `adapterRecoveryDelayCap`. A controller that
        /// wedged while discovering hears no advert, and nothing on D-Bus
        /// shows it: bluetoothd keeps `Powered` and `Discovering`, and a
        /// StartDiscovery it sends to the wedged controller answers
        /// `InProgress`, as if discovery already ran. Asked late, the dongle
        /// (which advertises ~180 s after a drop) would be asleep by the time
        /// the controller is recovered.
        public var searchControllerCheck: Duration = .seconds(30)
        /// The first pause before powering the adapter on again after an
        /// escalation left it off; it doubles after each try up to
        /// `adapterRecoveryDelayCap`, so a controller that refuses for good
        /// (wedged, and no USB step configured or none helped) costs a few
        /// journal lines an hour, not one every 10 s.
        public var powerOnRetry: Duration = .seconds(10)
        /// The pause after an adapter recovery round (rfkill unblock, USB
        /// reset or rebind of a controller that failed its initialisation)
        /// that left the adapter unusable; it doubles each round up to the
        /// cap, so a controller that never comes back costs one journal line
        /// per round, not a flood.
        public var adapterRecoveryDelay: Duration = .seconds(30)
        public var adapterRecoveryDelayCap: Duration = .seconds(600)
        /// After this many failed attempts of a window, the controller is
        /// asked (once per window) whether it still answers: a wedged one
        /// makes every attempt fail while bluetoothd says it is powered, and
        /// waiting out a whole window (minutes) would outlast the ~180 s a
        /// dropped dongle keeps advertising. Nil: never asked.
        public var controllerCheckAfterFailures: Int? = 2
        /// How long to wait, after the notification socket closed, for
        /// bluetoothd to report the link down before taking the link as up
        /// (someone else's StopNotify closed it) and connecting again.
        public var linkLossConfirmation: Duration = .seconds(2)
        /// Which device objects may be removed (Adapter1.RemoveDevice) after
        /// a retry window failed with errors that point at a stale object.
        public var staleDeviceRemoval: StaleDeviceRemoval = .unbonded
        /// No notification for this long while subscribed and the link is
        /// taken for dead (the dongle's application hung while its radio
        /// keeps the link): disconnect and reconnect. Nil: never; then
        /// `online` comes with the subscription, data or not.
        public var silenceLimit: Duration?
        /// Tether pairs with the dongle (`dongle.pairing` is not "never"):
        /// Device1.Pair when the device holds no bond, and once per outage
        /// again when the dongle refuses its bond.
        public var pairs = false
        /// Caps a Device1.Pair: bluetoothd's own bonding timeout is 120 s,
        /// but a pairing that works takes seconds (the agent answers at once).
        public var pairingTimeout: Duration = .seconds(30)
        /// Connects in a row that drop before services resolve, on a bonded
        /// device, taken for a refused bond when the kernel's reason is not
        /// heard.
        public var dropsBeforeResolveForBondLoss = 2
        /// After a window whose connects found nobody, with no evidence yet
        /// that the controller works: how long to listen for some (another
        /// device's advertisement, an answered controller check) before
        /// taking the window for a fault after all.
        public var awayListen: Duration = .seconds(10)
        /// While away, where other devices were heard: none heard for this
        /// long means the scan stalled (BlueZ's LE scan can stop delivering
        /// advertisements while `Discovering` stays true): discovery is
        /// started again, and if the next period hears nobody either, the
        /// controller steps run. Home Assistant restarts its scanner after
        /// 90 to 120 s of silence.
        public var scanStallAfter: Duration = .seconds(120)
        /// While away in a quiet place (nobody heard), the discovery session
        /// is renewed this often: there, silence cannot tell a stalled scan.
        public var discoveryRenewal: Duration = .seconds(600)

        public init(
            policy: ReconnectPolicy, keepaliveEnabled: Bool = true, keepaliveInterval: Duration = .seconds(5),
            keepaliveTimeout: Duration = .seconds(3), escalation: [EscalationStep] = []
        ) {
            self.policy = policy
            self.keepaliveEnabled = keepaliveEnabled
            self.keepaliveInterval = keepaliveInterval
            self.keepaliveTimeout = keepaliveTimeout
            self.escalation = escalation
        }
    }

    /// What `tether status` and the control API show.
    public struct Status: Sendable, Equatable {
        public var state: SupervisorState = .waitingForBluez
        /// Attempts made in the current window (0 when there is none).
        public var windowAttempt = 0
        /// When the next attempt is due, on the supervisor's clock.
        public var nextAttemptAt: Duration?
        public var lastError: String?
        /// Times the link came back after being lost.
        public var reconnects = 0
        public var connectedSince: Duration?
        /// Times the silence limit passed while subscribed.
        public var silenceEvents = 0
        /// The dongle refuses its bond and Tether does not (or no longer)
        /// pair again: what an operator must do. Nil once online.
        public var bondProblem: String?
        /// While away: since when (the supervisor's clock).
        public var awaySince: Duration?

        public init() {}
    }

    public let settings: Settings
    public private(set) var observation = LinkObservation()
    /// Where the supervisor is; see `State`.
    private var current: State = .waitingForBluez
    private var history = History()
    private var outstanding = Outstanding()
    private var lastError: String?
    private var reconnects = 0
    private var silenceEvents = 0
    private var random: SplitMix64
    /// The time of the event being handled, and the actions it produced.
    private var now: Duration = .zero
    private var actions: [SupervisorAction] = []

    public init(settings: Settings, seed: UInt64) {
        self.settings = settings
        random = SplitMix64(seed: seed)
    }

    public var state: SupervisorState { current.name }
    /// A `.checkController` is out and not answered (for tests).
    var pendingControllerCheck: Bool { outstanding.controllerCheck }
    /// Listening for evidence that the controller works after a window that
    /// found nobody (for tests: it shows as `backingOff`).
    var listeningForEvidence: Bool { if case .away(let away) = current { !away.confirmed } else { false } }

    /// What `tether status` and the control API show, derived from the state.
    public var status: Status {
        var status = Status()
        status.state = current.name
        status.windowAttempt = current.window?.attempts ?? 0
        switch current {
        case .backingOff(_, let at): status.nextAttemptAt = at
        case .coolingDown(let cooldown): status.nextAttemptAt = cooldown.blindAttemptAt
        case .online(_, let since): status.connectedSince = since
        case .away(let away) where away.confirmed: status.awaySince = away.since
        default: break
        }
        status.lastError = lastError
        status.reconnects = reconnects
        status.silenceEvents = silenceEvents
        if case .reported(let problem) = history.bondLoss { status.bondProblem = problem }
        return status
    }

    private var policy: ReconnectPolicy { settings.policy }

    // MARK: Input

    /// Handles one event at monotonic time `time` and returns what to do, in order.
    public mutating func handle(_ event: SupervisorEvent, at time: Duration) -> [SupervisorAction] {
        now = time
        actions = []
        switch event {
        case .observed(let new): observe(new)
        case .advertising: dongleAdvertising()
        case .othersAdvertising:
            history.othersHeardAt = now
            if var scan = current.scanWatch {
                let quietUntilNow = !scan.othersHeard
                scan.othersHeard = true
                scan.stallRestarts = 0
                setScanWatch(scan)
                // Taken for a quiet place so far (the window's connects ran
                // without discovery: nobody heard yet at the verdict; a
                // search begun where nobody was heard), busy now: from here
                // silence is a stall, not the session's renewal ten minutes
                // on (`make e2e`'s scan-stalled).
                if quietUntilNow {
                    cancelTimer(.scanWatch)
                    startTimer(.scanWatch, after: settings.scanStallAfter)
                }
            }
            evidenceArrived("other devices are heard advertising")
        case .connectFinished(let id, let result): connectFinished(id, result)
        case .subscribeFinished(let id, let result): subscribeFinished(id, result)
        case .pairFinished(let id, let result): pairFinished(id, result)
        case .bondRejected(let detail): bondRejected(detail)
        case .pollFinished(let id, let result): pollFinished(id, result)
        case .escalationFinished(let step, let result): escalationFinished(step, result)
        case .discoveryFailed(let failure): discoveryFailed(failure)
        case .timerFired(let timer): timerFired(timer)
        case .notificationsEnded(let why): notificationsEnded(why)
        case .reconnectRequested: reconnectRequested()
        case .dataReceived: dataReceived()
        case .characteristicsChanged: characteristicsChanged()
        case .removeDeviceFinished(let result): removeDeviceFinished(result)
        case .controllerChecked(let check): controllerChecked(check)
        }
        answerReconnectIfDecided()
        return actions
    }

    /// A waiting reconnect request is answered once: when a connect attempt
    /// starts, or when bluetoothd or the adapter goes away first.
    private mutating func answerReconnectIfDecided() {
        guard outstanding.reconnectAnswer else { return }
        if actions.contains(where: { if case .answerReconnect = $0 { true } else { false } }) {
            outstanding.reconnectAnswer = false
        } else if actions.contains(where: { if case .connect = $0 { true } else { false } }) {
            outstanding.reconnectAnswer = false
            actions.append(.answerReconnect(.started(attempt: current.window?.attempts ?? 0)))
        } else if case .waitingForBluez = current {
            outstanding.reconnectAnswer = false
            actions.append(.answerReconnect(.notReady("bluetoothd went away")))
        } else if case .waitingForAdapter = current {
            outstanding.reconnectAnswer = false
            actions.append(.answerReconnect(.notReady("the adapter went away or was powered off")))
        }
    }

    // MARK: Observations

    private mutating func observe(_ new: LinkObservation) {
        let old = observation
        observation = new
        if !new.devicePresent { history.deviceObjectGone = false }
        if new.radioBlock != old.radioBlock {
            actions.append(.report(new.radioBlock == .none ? .radioUnblocked : .radioBlocked(new.radioBlock)))
        }

        if !new.bluezReachable {
            // Told also when it was waited for already: a hung one that the
            // watchdog killed (systemd restarts it) is gone now.
            if old.bluezPresent && !new.bluezPresent { actions.append(.report(.bluezVanished)) }
            if case .waitingForBluez = current { return }
            linkGoneQuietly()
            return enter(.waitingForBluez, new.bluezPresent ? "bluetoothd does not answer" : "bluetoothd is not on the bus")
        }
        // An escalation switches the adapter off and on itself; it is
        // re-evaluated when the step finishes.
        if case .escalating = current { return }
        if !new.adapterUsable {
            adapterBecameUnusable()
            switch current {
            case .waitingForAdapter: return considerAdapterRecovery()
            case .waitingForBluez: break
            default: actions.append(.report(.adapterUnavailable))
            }
            linkGoneQuietly()
            enter(.waitingForAdapter(offByEscalation: false), adapterProblem)
            return considerAdapterRecovery()
        }
        if history.adapterUsableSince == nil { history.adapterUsableSince = now }

        switch current {
        case .waitingForBluez:
            if !old.bluezPresent, history.hasBeenOnline { actions.append(.report(.bluezAppeared)) }
            attemptOrSearch(window: Window(start: now), cause: old.bluezPresent ? "bluetoothd answers again" : "bluetoothd is on the bus")
        case .waitingForAdapter:
            cancelTimer(.powerOn)
            cancelTimer(.adapterRecovery)
            history.adapterUsableSince = now
            attemptOrSearch(window: Window(start: now), cause: "the adapter is powered on")
        case .searching:
            if deviceKnown {
                history.searchChecks = 0
                stopDiscoveryIfRunning()
                attempt(window: Window(start: now), cause: "the dongle is known to bluetoothd")
            }
        case .away(let away):
            // Its object made anew by discovery: it advertised.
            if deviceKnown, !old.devicePresent { back(from: away) }
        case .connecting(var setup, let connect):
            // The Connect reply decides.
            if new.connected && !setup.connectedSeen {
                setup.connectedSeen = true
                current = .connecting(setup, connect: connect)
            }
        case .resolving(var setup):
            if new.connected { setup.connectedSeen = true }
            if !new.connected && (old.connected || setup.connectedSeen) {
                linkLost(cause: "the link dropped while resolving services")
            } else if new.linkReady {
                startSubscribing(setup)
            } else {
                current = .resolving(setup)
            }
        case .pairing:
            if !new.connected { linkLost(cause: "the link dropped while pairing") }
        case .subscribing, .waitingForData, .online:
            if !new.connected { linkLost(cause: "the link dropped") }
        case .awaitingDisconnect(let wait):
            guard !new.connected else { return }
            cancelTimer(.disconnectDeadline)
            if wait.requested { actions.append(.report(.disconnected(unexpected: false))) }
            scheduleAttempt(window: windowAfterLoss(wait.window, requested: wait.requested), cause: wait.cause)
        case .backingOff, .coolingDown, .escalating:
            break
        }
    }

    private mutating func dongleAdvertising() {
        history.lastSeen = now
        if case .away(let away) = current {
            guard deviceKnown else { return }
            return back(from: away)
        }
        if case .searching = current, history.deviceObjectGone, observation.devicePresent {
            // An advertisement on the dongle's object after bluetoothd said
            // it was gone: it has the dongle again.
            history.deviceObjectGone = false
            history.searchChecks = 0
            cancelTimer(.searchCheck)
            stopDiscoveryIfRunning()
            return attempt(window: Window(start: now), cause: "the dongle is advertising")
        }
        guard case .coolingDown(var cooldown) = current else { return }
        let silentSince = cooldown.lastAdvertisement ?? cooldown.listeningSince
        cooldown.lastAdvertisement = now
        current = .coolingDown(cooldown)
        // Seen again after a silence: it woke up (or was woken).
        guard deviceKnown, now - silentSince >= settings.advertisingSilence else { return }
        cancelTimer(.retry)
        stopDiscoveryIfRunning()
        attempt(window: Window(start: now, fromAdvertisement: true), cause: "the dongle is advertising")
    }

    /// The dongle that was away advertises: connect at once. Its window is
    /// one opened by an advertisement, so connects that fail now are a
    /// fault, not another absence.
    private mutating func back(from away: Away) {
        if case .listening(let window) = away.phase {
            // Heard while Tether was still making up its mind: it was there
            // all along, so the connects that found nobody are a fault.
            return listenedInVain(window)
        }
        history.searchChecks = 0
        stopDiscoveryIfRunning()
        actions.append(.report(.dongleBack(awayFor: now - away.since)))
        attempt(window: Window(start: now, fromAdvertisement: true), cause: "the dongle advertises again after \((now - away.since).roundedText) away")
    }

    // MARK: Attempts

    /// The dongle's object exists for the decisions: observed, and not
    /// answered for as gone since (`History.deviceObjectGone`).
    #if DST_BUG_CONNECTS_REMOVED_OBJECT  // planted bug (make dst-selftest): trusts the observation alone
    private var deviceKnown: Bool { observation.devicePresent }
    #else
    private var deviceKnown: Bool { observation.devicePresent && !history.deviceObjectGone }
    #endif

    private mutating func attemptOrSearch(window: Window, cause: String) {
        if deviceKnown {
            scheduleAttempt(window: window, cause: cause)
        } else {
            enterSearching(cause: cause)
        }
    }

    /// Schedules the next attempt of `window`, or exhausts it. No window: the
    /// failure was one that retrying soon will not fix.
    private mutating func scheduleAttempt(window: Window?, cause: String) {
        guard let window else { return enterCooldown(cause: cause) }
        // A blind attempt (after an escalation or a cooldown) is a single shot.
        if window.blind { return enterCooldown(cause: cause) }
        guard policy.windowAllows(attempt: window.attempts, at: now, windowStart: window.start) else {
            return exhaustWindow(window)
        }
        let n = window.attempts + 1
        let delay = policy.delay(beforeAttempt: n, unit: random.nextUnit())
        if n > 1, now + delay - window.start >= policy.window {
            // The next attempt would fall outside the window: give up on it now
            // rather than idle until then.
            return exhaustWindow(window)
        }
        if delay <= .zero {
            attempt(window: window, cause: cause)
        } else {
            startTimer(.retry, after: delay)
            enter(.backingOff(window, attemptAt: now + delay), "\(cause); attempt \(n) in \(delay.roundedText)")
        }
    }

    private mutating func attempt(window: Window, cause: String) {
        guard observation.adapterUsable else {
            linkGoneQuietly()
            return enter(.waitingForAdapter(offByEscalation: false), "\(cause); but the adapter is not powered")
        }
        guard deviceKnown else { return enterSearching(cause: cause) }
        if history.bondLoss == .removing {
            if observation.deviceBonded {
                var window = window
                window.attempts += 1
                removeRefusedBond()
                return attemptFailed(window, LinkFailure(.transient, "the dongle refuses the bond bluetoothd holds; removing it before connecting"), cancel: false)
            }
            // Found again without it: the removal happened (its answer may
            // have been lost with bluetoothd).
            history.bondLoss = .renewed
        }
        var window = window
        window.attempts += 1
        let connect = nextOperation()
        actions.append(.report(.reconnectAttempt(attempt: window.attempts, blind: window.blind)))
        enter(.connecting(LinkSetup(window: window, connectedSeen: observation.connected), connect: connect), "\(cause); attempt \(window.attempts)")
        actions.append(.connect(attempt: connect, timeout: policy.connectTimeout))
        startTimer(.attemptDeadline, after: policy.connectTimeout)
    }

    private mutating func connectFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard case .connecting(let setup, let connect) = current, connect == id else { return }
        switch result {
        case .success:
            if observation.linkReady {
                startSubscribing(setup)
            } else if setup.connectedSeen && !observation.connected {
                linkLost(cause: "the link dropped right after connecting")
            } else {
                enter(.resolving(setup), "connected; waiting for services")
            }
        case .failure(let failure):
            let droppedBeforeResolve = setup.connectedSeen && !observation.connected && observation.deviceBonded
            attemptFailed(setup.window, failure, cancel: failure.kind == .needsCancel)
            if droppedBeforeResolve {
                droppedBeforeResolving(failure.description)
            } else {
                history.dropsBeforeResolve = 0
            }
        }
    }

    /// Linux's LE connection timeout (HCI_LE_CONN_TIMEOUT, 20 s): a Connect
    /// the kernel makes ends by then, connected or not.
    static let kernelLEConnectionTimeout: Duration = .seconds(20)

    private mutating func attemptFailed(_ window: Window, _ failure: LinkFailure, cancel: Bool) {
        cancelTimer(.attemptDeadline)
        lastError = failure.description
        var window = window
        if failure.staleDevice {
            window.staleFailures += 1
            window.lastStaleError = failure.description
        }
        if failure.noAnswer { window.unanswered += 1 }
        actions.append(.report(.attemptFailed(attempt: window.attempts, error: failure.description)))
        if cancel { actions.append(.disconnect) }
        if failure.deviceGone {
            // Another attempt on the object would only fail the same way:
            // the dongle is unknown until discovery finds it again (after a
            // removal Tether asked for, the reply can come before
            // bluetoothd's InterfacesRemoved).
            history.deviceObjectGone = observation.devicePresent
            return enterSearching(cause: "attempt failed: \(failure.description)")
        }
        checkControllerIfDue(&window)
        if failure.kind == .fatal {
            return enterCooldown(cause: "error that retrying soon will not fix: \(failure.description)")
        }
        if case .reported(let problem) = history.bondLoss {
            return enterCooldown(cause: problem)
        }
        if window.blind, cancel, !window.retriedAfterCancel {
            // The single shot never went out: a connect stuck in bluetoothd
            // took its place (InProgress). Cancelled now, it is tried once
            // more rather than a whole cooldown later, when a dongle that
            // stopped advertising may be asleep.
            window.retriedAfterCancel = true
            let delay = policy.initialBackoff
            startTimer(.retry, after: delay)
            return enter(
                .backingOff(window, attemptAt: now + delay),
                "attempt failed: \(failure.description); the stuck connect cancelled, trying again in \(delay.roundedText)")
        }
        scheduleAttempt(window: window, cause: "attempt failed: \(failure.description)")
    }

    private mutating func startSubscribing(_ setup: LinkSetup, cause: String = "services resolved") {
        if settings.pairs, !observation.deviceBonded, !setup.paired {
            return startPairing(setup, cause: cause)
        }
        let subscribe = nextOperation()
        enter(.subscribing(setup, subscribe: subscribe), cause)
        actions.append(.subscribe(attempt: subscribe))
    }

    private mutating func subscribeFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard case .subscribing(let setup, let subscribe) = current, subscribe == id else { return }
        switch result {
        case .success:
            subscribed(setup)
        case .failure(let failure):
            attemptFailed(setup.window, failure, cancel: true)
        }
    }

    /// Subscribed: online at once without a silence limit; with one, only
    /// once data flows (it may have come already: bluetoothd re-arms its
    /// notify sessions on reconnect, before we subscribe again).
    private mutating func subscribed(_ setup: LinkSetup) {
        let session = Session(subscribedAt: now, lastDataAt: setup.lastDataAt)
        guard let limit = settings.silenceLimit else {
            return goOnline(session, window: setup.window, resubscribing: setup.resubscribing, polling: false)
        }
        startTimer(.silence, after: limit)
        if setup.lastDataAt != nil {
            return goOnline(session, window: setup.window, resubscribing: setup.resubscribing, polling: false)
        }
        // The silence timer bounds this wait; the attempt's deadline is done.
        cancelTimer(.attemptDeadline)
        enter(
            .waitingForData(session, window: setup.window, resubscribing: setup.resubscribing),
            "subscribed; waiting for the first notification (silence limit \(limit.roundedText))")
        if settings.keepaliveEnabled { poll() }
    }

    /// The hot path: at most once per loop turn while notifications flow.
    private mutating func dataReceived() {
        switch current {
        case .online(var session, let since):
            session.lastDataAt = now
            current = .online(session, since: since)
        case .connecting(var setup, let connect):
            setup.lastDataAt = now
            current = .connecting(setup, connect: connect)
        case .resolving(var setup):
            setup.lastDataAt = now
            current = .resolving(setup)
        case .pairing(var setup, let pair):
            setup.lastDataAt = now
            current = .pairing(setup, pair: pair)
        case .subscribing(var setup, let subscribe):
            setup.lastDataAt = now
            current = .subscribing(setup, subscribe: subscribe)
        case .waitingForData(var session, let window, let resubscribing):
            session.lastDataAt = now
            goOnline(session, window: window, resubscribing: resubscribing, polling: true)
        default:
            break
        }
    }

    /// Online: the window of the attempt that got here is closed.
    /// `polling`: the keep-alive already runs (from waiting-for-data).
    private mutating func goOnline(_ session: Session, window: Window, resubscribing: Bool, polling: Bool) {
        cancelTimer(.attemptDeadline)
        history.bondLoss = .none
        history.dropsBeforeResolve = 0
        if history.hasBeenOnline && !resubscribing { reconnects += 1 }
        history.hasBeenOnline = true
        history.removedStaleDevice = false
        actions.append(.report(.connected(attempt: window.attempts)))
        enter(.online(session, since: now), polling ? "data flows" : settings.silenceLimit == nil ? "subscribed" : "subscribed; data flows")
        // The first poll goes out at once: the dongle's idle clock has run
        // since the connect, and resolving services can take seconds.
        if settings.keepaliveEnabled && !polling { poll() }
    }

    /// The link went down while it was up or coming up. A drop while coming
    /// up is a failed attempt of the current window; a drop from online opens
    /// a new window, whose first attempt comes at once unless the link has
    /// been flapping.
    private mutating func linkLost(cause: String) {
        let window = current.window
        let wasOnline = countSession()
        stopLinkActivity()
        actions.append(.report(.disconnected(unexpected: true)))
        scheduleAttempt(window: wasOnline ? windowAfterLoss(nil, requested: false) : window ?? Window(start: now), cause: cause)
    }

    /// Counts a session that ends now against `stableLink`; false if the link
    /// was not online (it was still coming up).
    private mutating func countSession() -> Bool {
        guard case .online(_, let since) = current else { return false }
        history.shortSessions = now - since < settings.stableLink ? history.shortSessions + 1 : 0
        return true
    }

    /// The window after a loss: a link that never carried data keeps the
    /// window of the attempt that brought it up; otherwise a new one, in
    /// which a flapping link's drops count as failed attempts (a drop we
    /// asked for does not).
    private func windowAfterLoss(_ window: Window?, requested: Bool) -> Window {
        if let window { return window }
        var window = Window(start: now, attempts: requested ? 0 : max(0, history.shortSessions - 1))
        window.flapped = window.attempts
        return window
    }

    /// The notification socket closed while the link was up or being
    /// subscribed. The loss counts from now; bluetoothd's Connected=false
    /// normally follows within milliseconds and opens the retry window. If
    /// it does not come, the link is up without our notifications (another
    /// client's StopNotify): the deadline then connects again, which
    /// succeeds at once and acquires anew.
    /// While subscribing it is a failed attempt of the current window, as
    /// any drop while coming up.
    private mutating func notificationsEnded(_ why: String) {
        switch current {
        case .subscribing, .waitingForData:
            linkLost(cause: why)
        case .online:
            _ = countSession()
            stopLinkActivity()
            actions.append(.report(.disconnected(unexpected: true)))
            startTimer(.disconnectDeadline, after: settings.linkLossConfirmation)
            enter(
                .awaitingDisconnect(DisconnectWait(cause: why, requested: false, window: nil)),
                "\(why); waiting for bluetoothd to report the link down")
        default:
            break
        }
    }

    // MARK: Pairing and bonds

    /// Services resolved on a device without a bond, and Tether pairs: the
    /// pairing gets its own deadline (an agent's answer, a passkey entry).
    private mutating func startPairing(_ setup: LinkSetup, cause: String) {
        let pair = nextOperation()
        cancelTimer(.attemptDeadline)
        startTimer(.attemptDeadline, after: settings.pairingTimeout)
        enter(.pairing(setup, pair: pair), "\(cause); the dongle holds no bond: pairing")
        actions.append(.pair(attempt: pair, timeout: settings.pairingTimeout))
    }

    private mutating func pairFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard case .pairing(var setup, let pair) = current, pair == id else { return }
        switch result {
        case .success:
            actions.append(.report(.paired))
            setup.paired = true
            cancelTimer(.attemptDeadline)
            startTimer(.attemptDeadline, after: policy.connectTimeout)
            startSubscribing(setup, cause: "paired")
        case .failure(let failure) where failure.unauthenticatedBond:
            // Not the dongle's proof: the link is dropped unused, the bond
            // removed, and the windows cool down until an operator looks
            // (status's bond row); each cooldown's attempt pairs anew, one
            // removal each, never a loop.
            actions.append(.report(.pairingFailed(error: failure.description, unauthenticated: true)))
            history.bondLoss = .reported(problem: "\(failure.description); Tether removed that bond")
            attemptFailed(setup.window, LinkFailure(.fatal, "pairing failed: \(failure.description)"), cancel: true)
            removeRefusedBond()
        case .failure(let failure):
            actions.append(.report(.pairingFailed(error: failure.description)))
            attemptFailed(setup.window, LinkFailure(failure.kind, "pairing failed: \(failure.description)"), cancel: true)
        }
    }

    /// The dongle refused the bond bluetoothd holds. Tether renews it once
    /// per outage when it pairs: RemoveDevice takes the object and its keys,
    /// discovery finds the dongle anew, and the next attempt pairs. A second
    /// refusal in the same outage, or one while Tether does not pair, is
    /// reported once and left to the operator (status says what to do);
    /// attempts go on in their windows, never as a loop of re-pairings.
    private mutating func bondRejected(_ detail: String) {
        guard observation.devicePresent, observation.deviceBonded else { return }
        history.dropsBeforeResolve = 0
        lastError = "the dongle refused its bond (\(detail)): it has lost its keys (a factory reset?)"
        switch history.bondLoss {
        case .reported, .removing:
            return
        case .renewed:
            // Renewed already in this outage and refused again: said once,
            // then left to the windows and the operator.
            let why = "Tether removed the bond and paired again once in this outage already, and does not loop: check the dongle, then `tether reconnect`"
            history.bondLoss = .reported(problem: "the dongle refuses its new bond too; \(why)")
            return actions.append(.report(.bondLost(detail: detail, repairing: false, why: why)))
        case .none:
            break
        }
        guard settings.pairs else {
            let why = "dongle.pairing is \"never\": remove the bond (bluetoothctl remove <address>) and pair again, or set dongle.pairing"
            history.bondLoss = .reported(problem: "the dongle refuses its bond; \(why)")
            return actions.append(.report(.bondLost(detail: detail, repairing: false, why: why)))
        }
        history.bondLoss = .removing
        actions.append(.report(.bondLost(detail: detail, repairing: true, why: nil)))
        removeRefusedBond()
    }

    /// Asks for the removal of the refused bond, unless one is in flight.
    private mutating func removeRefusedBond() {
        guard !outstanding.removal else { return }
        outstanding.removal = true
        actions.append(.removeDevice)
    }

    /// A connect on a bonded device came up and dropped before services
    /// resolved: a refused bond shows so on D-Bus alone (bluetoothd 5.66
    /// answers Connect with "le-connection-abort-by-local" in `make e2e`, or
    /// "br-connection-canceled" by its sources), but so does a bad radio moment, so
    /// only a run of them counts, and only while the kernel's reasons are
    /// not heard.
    private mutating func droppedBeforeResolving(_ error: String) {
        // The kernel would have said so (Device Disconnected reason 4): a
        // dongle out of reach or a busy channel drops links early too.
        guard !observation.disconnectReasonsHeard else { return }
        history.dropsBeforeResolve += 1
        let drops = history.dropsBeforeResolve
        guard drops >= settings.dropsBeforeResolveForBondLoss else { return }
        bondRejected("\(drops) connects in a row dropped before services resolved, last: \(error)")
    }

    // MARK: Keep-alive

    /// Runs `body` on the session of a link that is up; false if there is none.
    private mutating func withSession(_ body: (inout Session) -> Void) -> Bool {
        switch current {
        case .waitingForData(var session, let window, let resubscribing):
            body(&session)
            current = .waitingForData(session, window: window, resubscribing: resubscribing)
        case .online(var session, let since):
            body(&session)
            current = .online(session, since: since)
        default:
            return false
        }
        return true
    }

    private mutating func poll() {
        guard let session = current.session else { return }
        #if DST_BUG_NO_KEEPALIVE_AFTER_RECONNECT  // planted bug (make dst-selftest): polls stop after the first reconnect
        if reconnects > 0 { return }
        #endif
        // Fixed rate: the next poll is due one interval after this one
        // started, whatever this one takes.
        startTimer(.keepalive, after: settings.keepaliveInterval)
        if session.pollInFlight != nil { return }  // the deadline will judge it
        if let every = settings.keepaliveConfirmEvery, let last = session.lastConfirmedPollAt, now - last < every {
            actions.append(.pollWithoutReply)
            return
        }
        let poll = nextOperation(), sentAt = now
        _ = withSession { session in
            session.pollInFlight = poll
            session.lastConfirmedPollAt = sentAt
        }
        actions.append(.poll(poll, timeout: settings.keepaliveTimeout))
        startTimer(.pollDeadline, after: settings.keepaliveTimeout)
    }

    private mutating func pollFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard let session = current.session, session.pollInFlight == id else { return }
        _ = withSession { session in
            session.pollInFlight = nil
            if case .success = result { session.failedPolls = 0 }
        }
        cancelTimer(.pollDeadline)
        if case .failure(let failure) = result { pollFailed(failure.description) }
    }

    private mutating func pollFailed(_ error: String) {
        var failed = 0
        guard withSession({ session in
            session.failedPolls += 1
            failed = session.failedPolls
        }) else { return }
        lastError = "keep-alive: \(error)"
        #if DST_BUG_STATUS_CHANGED_UNTOLD  // planted bug (make dst-selftest): a failed poll changes the status silently
        if failed < settings.failedPollsBeforeReconnect { return }
        #endif
        actions.append(.report(.linkCheckFailed(consecutive: failed, error: error)))
        if failed >= settings.failedPollsBeforeReconnect {
            forceReconnect(cause: "\(failed) keep-alive polls failed in a row", window: current.window)
        }
    }

    /// Drops a link that is up (or thought to be) and reconnects once
    /// bluetoothd confirms the disconnect, or after a deadline. `window`: the
    /// window that goes on afterwards (an attempt that never carried data).
    private mutating func forceReconnect(cause: String, window: Window?) {
        stopLinkActivity()
        actions.append(.disconnect)
        startTimer(.disconnectDeadline, after: policy.connectTimeout)
        enter(.awaitingDisconnect(DisconnectWait(cause: cause, requested: true, window: window)), "\(cause); disconnecting")
    }

    // MARK: A changed GATT database

    /// Subscribes again on the new objects, or waits (bounded by the attempt
    /// deadline) for them to be exported. A failure from here on is a failed
    /// attempt of a window, as for any link coming up.
    private mutating func characteristicsChanged() {
        let connectedSeen: Bool
        switch current {
        case .resolving(let setup), .pairing(let setup, _), .subscribing(let setup, _): connectedSeen = setup.connectedSeen
        case .waitingForData, .online: connectedSeen = observation.connected
        default: return
        }
        let window = current.window ?? Window(start: now, attempts: 1)
        stopLinkActivity()
        startTimer(.attemptDeadline, after: policy.connectTimeout)
        let setup = LinkSetup(window: window, connectedSeen: connectedSeen, resubscribing: true)
        if observation.linkReady {
            startSubscribing(setup, cause: "the dongle's GATT database changed; subscribing again")
        } else {
            enter(.resolving(setup), "the dongle's GATT database changed; waiting for its characteristics")
        }
    }

    // MARK: Silence

    /// The silence timer fired: judge the time since the last notification
    /// (or since the subscription, if none came) and re-arm for the rest.
    private mutating func silenceTimerFired() {
        guard let limit = settings.silenceLimit, let session = current.session else { return }
        let reference = max(session.lastDataAt ?? session.subscribedAt, session.subscribedAt)
        let silent = now - reference
        guard silent >= limit else { return startTimer(.silence, after: limit - silent) }
        let window = current.window
        #if DST_BUG_ONLINE_AFTER_SILENCE  // planted bug (make dst-selftest): a proven link stays online, silent
        if window == nil { return startTimer(.silence, after: limit) }
        #endif
        let proven = window == nil  // online; waiting-for-data keeps its attempt's window
        let what = proven
            ? "no notification for \(silent.roundedText) (silence limit \(limit.roundedText))"
            : "no notification within \(silent.roundedText) of subscribing (silence limit \(limit.roundedText))"
        silenceEvents += 1
        lastError = what
        actions.append(.report(.silence(silentFor: silent, limit: limit, proven: proven)))
        if var window {
            // The attempt that brought the link up never carried data: it
            // failed, and its window (still open) goes on.
            actions.append(.report(.attemptFailed(attempt: window.attempts, error: what)))
            checkControllerIfDue(&window)
            return forceReconnect(cause: what, window: window)
        }
        // A link that carried data fell silent: a hung application, or a
        // controller that stopped answering (its link layer may keep the
        // link up in bluetoothd's eyes). Asking tells them apart at once.
        requestControllerCheck()
        forceReconnect(cause: what, window: nil)
    }

    // MARK: Escalation and cooldown

    private mutating func exhaustWindow(_ window: Window) {
        if foundNobody(window) {
            // Away or not: an object that looks stale and holds no bond goes
            // now (discovery makes it anew when the dongle advertises; a
            // stale one would never show that), a bonded one never here.
            if !observation.deviceBonded { removeStaleDeviceIfDue(window) }
            if let evidence = controllerEvidence(since: window.start) { return confirmAway(evidence: evidence) }
            return listenForEvidence(after: window)
        }
        windowFailed(window)
    }

    /// An exhausted window that is a fault: the stale object removed if it
    /// looks so, then the escalation steps or cooling down.
    private mutating func windowFailed(_ window: Window) {
        actions.append(.report(.windowExhausted(attempts: window.attempts)))
        // Then as after any exhausted window: the escalation steps, or
        // cooling down. Either way discovery makes the object anew once the
        // dongle advertises, and the next window starts from it.
        removeStaleDeviceIfDue(window)
        if settings.escalation.isEmpty { return enterCooldown(cause: "retry window exhausted") }
        escalate(settings.escalation, reconnectRequested: false)
    }

    /// Whether `window` looks like an absent dongle: every attempt it made
    /// found nobody (`LinkFailure.noAnswer`; the short sessions it started
    /// with do not count: a link that came up and dropped before the dongle
    /// left is no sign against its absence), and it was neither opened by the
    /// dongle's own advertisement (then it is there, and connects fail) nor
    /// a blind one, with no bond trouble. A wedged controller or a stale
    /// object gives such windows too: only evidence about the controller
    /// (`controllerEvidence`) makes it away.
    private func foundNobody(_ window: Window) -> Bool {
        !window.blind && !window.fromAdvertisement && window.attempts > window.flapped
            && window.unanswered == window.attempts - window.flapped && history.bondLoss == .none
    }

    /// What shows that the controller works, seen since `start`: it
    /// answered a controller check, or another device was heard advertising.
    private func controllerEvidence(since start: Duration) -> String? {
        if let at = history.controllerAnsweredAt, at >= start { return "the controller answers" }
        if let at = history.othersHeardAt, at >= start { return "other devices are heard advertising" }
        return nil
    }

    /// Connects found nobody and nothing shows yet whether the controller
    /// works: discovery (which hears other advertisers, and the dongle if it
    /// is back) and a controller check, for `awayListen`.
    private mutating func listenForEvidence(after window: Window) {
        if !current.discovering { actions.append(.startDiscovery) }
        requestControllerCheck()
        cancelTimer(.searchCheck)
        startTimer(.searchCheck, after: settings.awayListen)
        enter(
            .away(Away(phase: .listening(window), discovery: Discovery(running: true), since: history.lastSeen ?? now)),
            "\(window.attempts) attempts found nobody; listening \(settings.awayListen.roundedText) for whether the controller hears anyone")
    }

    /// Evidence that the controller works, while listening for it: away.
    private mutating func evidenceArrived(_ evidence: String) {
        guard case .away(let away) = current, !away.confirmed else { return }
        confirmAway(evidence: evidence)
    }

    /// Listening heard nobody and the controller did not say it works, or
    /// heard the dongle itself (it was there): the window is a fault after all.
    private mutating func listenedInVain(_ window: Window) {
        stopDiscoveryIfRunning()
        windowFailed(window)
    }

    /// The dongle is away: said once, then discovering until it advertises,
    /// the controller checked at the search's pace. No escalation, no
    /// removal of its object, no blind attempts: discovery sees it return.
    private mutating func confirmAway(evidence: String) {
        var discovery = Discovery(running: true)
        var since = history.lastSeen ?? now
        if case .away(let listening) = current {
            discovery = listening.discovery
            since = listening.since
        } else if !current.discovering {
            actions.append(.startDiscovery)
        }
        actions.append(.report(.dongleAway(lastSeen: history.lastSeen, evidence: evidence)))
        history.searchChecks = 0
        cancelTimer(.searchCheck)
        startTimer(.searchCheck, after: searchCheckDelay)
        var away = Away(phase: .confirmed(evidence: evidence), discovery: discovery, since: since)
        // Heard since the dongle was last seen: this place has others.
        away.scan.othersHeard = history.othersHeardAt.map { $0 >= since } ?? false
        startTimer(.scanWatch, after: away.scan.othersHeard ? settings.scanStallAfter : settings.discoveryRenewal)
        enter(.away(away), "the dongle is away (\(evidence)); connecting when it advertises")
    }

    /// While searching or away: a scan that heard others and now hears
    /// nobody has stalled (discovery again, then the controller steps); in
    /// a quiet place the discovery session is renewed. Re-armed lazily from
    /// the last time anyone was heard.
    private mutating func scanWatchFired() {
        guard var scan = current.scanWatch, let discovery = current.discovery else { return }
        guard scan.othersHeard, let heardAt = history.othersHeardAt else {
            // Quiet: nothing to judge; a fresh session in case it stalled.
            if discovery.running {
                actions.append(.stopDiscovery)
                actions.append(.startDiscovery)
            }
            return startTimer(.scanWatch, after: settings.discoveryRenewal)
        }
        let silentFor = now - heardAt
        if silentFor < settings.scanStallAfter {
            return startTimer(.scanWatch, after: settings.scanStallAfter - silentFor)
        }
        if scan.stallRestarts == 0 {
            scan.stallRestarts = 1
            setScanWatch(scan)
            actions.append(.report(.scanStalled(silentFor: silentFor, restarting: true)))
            if discovery.running { actions.append(.stopDiscovery) }
            setDiscovery(running: true)
            actions.append(.startDiscovery)
            return startTimer(.scanWatch, after: settings.scanStallAfter)
        }
        // Started again and still nobody: the controller.
        actions.append(.report(.scanStalled(silentFor: silentFor, restarting: false)))
        let steps = settings.escalation.filter { $0 != .rfkillUnblock }
        guard !steps.isEmpty else {
            scan.stallRestarts += 1
            setScanWatch(scan)
            return startTimer(.scanWatch, after: pacedDelay(settings.scanStallAfter, doubled: scan.stallRestarts - 1))
        }
        stopDiscoveryIfRunning()
        escalate(steps, reconnectRequested: false, cause: "the scan stalled: nobody heard for \(silentFor.roundedText)")
    }

    /// Runs the first of `steps`; with none left, one attempt to see whether
    /// the escalation helped (or the reconnect someone asked for meanwhile).
    /// `rfkill-unblock` is skipped while nothing is soft-blocked: it would
    /// change nothing and only log a step "done".
    private mutating func escalate(
        _ steps: [EscalationStep], reconnectRequested: Bool, cause: String = "retry window exhausted"
    ) {
        let steps = steps.drop { $0 == .rfkillUnblock && observation.radioBlock != .soft }
        guard let step = steps.first else {
            if reconnectRequested { return attempt(window: Window(start: now), cause: "reconnect requested") }
            // Not asked about the controller if it fails: the steps just
            // dealt with it, and asking again would run them again at once.
            // The next cooldown's blind attempt asks.
            return attempt(window: Window(start: now, blind: true, controllerChecked: true), cause: "escalation done")
        }
        let escalation = Escalation(purpose: .exhaustedWindow, cause: cause, step: step, remaining: Array(steps.dropFirst()))
        enter(.escalating(escalation), "\(cause); \(step.rawValue)")
        actions.append(.escalate(step))
    }

    /// Asks the controller whether it answers once a window has failed
    /// `controllerCheckAfterFailures` attempts, or a cooldown's blind attempt
    /// failed (nothing else would notice a controller that wedged while the
    /// dongle slept: with it, the dongle's adverts never arrive), once per
    /// window.
    private mutating func checkControllerIfDue(_ window: inout Window) {
        guard let after = settings.controllerCheckAfterFailures, window.attempts >= after || window.blind,
              !window.controllerChecked, !outstanding.controllerCheck
        else { return }
        window.controllerChecked = true
        requestControllerCheck()
    }

    private mutating func requestControllerCheck() {
        guard settings.controllerCheckAfterFailures != nil, !outstanding.controllerCheck else { return }
        outstanding.controllerCheck = true
        actions.append(.checkController)
    }

    /// The controller's own answer. A wedged one ends the attempts at once,
    /// whatever is in flight (it cannot succeed): the steps run without the
    /// power cycle, which goes through the very controller that does not
    /// answer (Home Assistant's recovery skips the power-off for a frozen
    /// one too).
    /// How long others' advertisements show that the controller works
    /// against an unanswered check: they are told at most every 10 s
    /// (`LinkService.othersAdvertisingEvery`), and the check waits 5 s.
    public static let advertisementsVouchFor: Duration = .seconds(16)

    private mutating func controllerChecked(_ check: ControllerCheck) {
        guard outstanding.controllerCheck else { return }
        outstanding.controllerCheck = false
        if check == .responsive {
            history.controllerAnsweredAt = now
            evidenceArrived("the controller answers")
        }
        guard case .unresponsive(let detail) = check else { return }
        // Waiting on discovery, advertisements that came through the
        // controller just now outweigh one command it answered late (a
        // loaded gateway; Bumble's controller in a TCG guest took over 5 s
        // once in `make e2e`'s parked): a wedged controller passes nothing
        // up, and the next check finds it so.
        if current.waitsForAdvertisement, let heardAt = history.othersHeardAt,
           now - heardAt <= Self.advertisementsVouchFor
        {
            return actions.append(.report(.controllerSlow(detail, heardAgo: now - heardAt)))
        }
        actions.append(.report(.controllerUnresponsive(detail)))
        let steps = settings.escalation.filter { $0 != .powerCycle }
        switch current {
        case .backingOff:
            cancelTimer(.retry)
        case .connecting, .resolving, .pairing, .subscribing, .waitingForData:
            stopLinkActivity()
            actions.append(.disconnect)  // cancels a pending Connect, drops a half-made link
        case .awaitingDisconnect:
            cancelTimer(.disconnectDeadline)
        case .coolingDown:
            // Its blind attempt failed on a controller that does not answer:
            // waiting for adverts it cannot hear would last for good. The
            // steps run now, once per cooldown (their own blind attempt does
            // not ask again).
            guard !steps.isEmpty else { return }
            cancelTimer(.retry)
            stopDiscoveryIfRunning()
        case .searching, .away:
            // Discovery through a controller that does not answer hears
            // nothing. The steps run at the pace of the search checks (the
            // escalation ends in a search, whose first check waits longer).
            guard !steps.isEmpty else { return }
            stopDiscoveryIfRunning()
        case .online, .waitingForBluez, .waitingForAdapter, .escalating:
            // Online again (it answered after all, late) or already past
            // attempting: nothing to end.
            return
        }
        if let window = current.window { actions.append(.report(.windowExhausted(attempts: window.attempts))) }
        if steps.isEmpty { return enterCooldown(cause: "the controller does not answer") }
        escalate(steps, reconnectRequested: false, cause: "the controller does not answer")
    }

    private mutating func escalationFinished(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) {
        guard case .escalating(let escalation) = current, escalation.step == step else { return }
        switch result {
        case .success: actions.append(.report(.escalation(step, outcome: "done")))
        case .failure(let failure): actions.append(.report(.escalation(step, outcome: failure.description)))
        }
        if !observation.bluezReachable {
            linkGoneQuietly()
            return enter(.waitingForBluez, observation.bluezPresent ? "bluetoothd does not answer" : "bluetoothd is not on the bus")
        }
        if case .adapterRecovery = escalation.purpose { return recoveryStepFinished(escalation) }
        if !observation.adapterUsable, !escalation.remaining.isEmpty, !escalation.reconnectRequested {
            // A wedged controller can be off or gone after a step that could
            // not reach it (a power cycle through bluetoothd); the next step,
            // a USB reset, may be the one that brings it back.
            return escalate(escalation.remaining, reconnectRequested: false, cause: escalation.cause)
        }
        if !observation.adapterUsable {
            linkGoneQuietly()
            return adapterUnusableAfter(step)
        }
        escalate(
            escalation.reconnectRequested ? [] : escalation.remaining, reconnectRequested: escalation.reconnectRequested,
            cause: escalation.cause)
    }

    /// After the last step, the adapter is still unusable: power it on if the
    /// step left it off, else wait for it (recovering it if steps apply).
    private mutating func adapterUnusableAfter(_ step: EscalationStep) {
        let cause = "\(adapterProblem) after \(step.rawValue)"
        guard observation.adapterPresent, observation.radioBlock == .none else {
            enter(.waitingForAdapter(offByEscalation: false), cause)
            return considerAdapterRecovery()
        }
        // We switched it off (or reset it and it came back off); nobody else
        // will switch it on.
        actions.append(.report(.adapterLeftOff))
        actions.append(.powerOn)
        history.powerOnRetries = 0
        startTimer(.powerOn, after: powerOnDelay)
        enter(.waitingForAdapter(offByEscalation: true), cause)
    }

    // MARK: Adapter recovery

    /// Why the adapter is unusable, for transitions, status and the log.
    private var adapterProblem: String {
        switch observation.radioBlock {
        case .hard: return "blocked by a hardware switch (rfkill hard block)"
        case .soft: return "blocked by rfkill (soft block)"
        case .none: break
        }
        if observation.adapterPresent { return "the adapter is powered off" }
        return observation.controllerFailed ? "no Bluetooth adapter: the controller failed its initialisation" : "no Bluetooth adapter"
    }

    /// The configured steps that can help the adapter as observed now: an
    /// rfkill unblock for a soft block; a USB reset or rebind for a
    /// controller that failed its initialisation. None for a hard block,
    /// which is waited out.
    private var recoverySteps: [EscalationStep] {
        switch observation.radioBlock {
        case .hard: return []
        case .soft: return settings.escalation.contains(.rfkillUnblock) ? [.rfkillUnblock] : []
        case .none: break
        }
        guard !observation.adapterPresent, observation.controllerFailed else { return [] }
        return settings.escalation.filter(\.reprobesController)
    }

    /// Waiting for the adapter: runs the steps that apply, at once the first
    /// time, then no sooner than the pace of `adapterRecovery` allows.
    private mutating func considerAdapterRecovery() {
        guard case .waitingForAdapter = current, !outstanding.timers.contains(.adapterRecovery) else { return }
        let steps = recoverySteps
        guard !steps.isEmpty else { return }
        if history.adapterRecoveries == 0 { return runRecovery(steps) }
        startTimer(.adapterRecovery, after: recoveryDelay)
    }

    /// Runs the first of `steps`; `continuing`: the next step of a round.
    private mutating func runRecovery(_ steps: [EscalationStep], continuing: Bool = false) {
        guard let step = steps.first else { return }
        if !continuing { history.adapterRecoveries += 1 }
        let escalation = Escalation(purpose: .adapterRecovery, cause: adapterProblem, step: step, remaining: Array(steps.dropFirst()))
        enter(.escalating(escalation), "\(adapterProblem); \(step.rawValue)")
        actions.append(.escalate(step))
    }

    /// The adapter is unusable now: if it had stayed usable long enough, the
    /// rounds before count no more.
    private mutating func adapterBecameUnusable() {
        guard let since = history.adapterUsableSince else { return }
        history.adapterUsableSince = nil
        if now - since >= settings.adapterRecoveryDelay { history.adapterRecoveries = 0 }
    }

    /// The pause before the next power-on, after `history.powerOnRetries` retries.
    private var powerOnDelay: Duration {
        pacedDelay(settings.powerOnRetry, doubled: history.powerOnRetries)
    }

    /// The pause before the next round, after `history.adapterRecoveries` rounds.
    private var recoveryDelay: Duration {
        pacedDelay(settings.adapterRecoveryDelay, doubled: max(history.adapterRecoveries, 1) - 1)
    }

    /// `first` doubled `times` times, at most `cap` (by default
    /// `adapterRecoveryDelayCap`): the pace of whatever Tether keeps doing
    /// for something that stays broken.
    private func pacedDelay(_ first: Duration, doubled times: Int, cap: Duration? = nil) -> Duration {
        Backoff(first: first, cap: cap ?? settings.adapterRecoveryDelayCap).delay(afterFailures: times)
    }

    private mutating func recoveryStepFinished(_ escalation: Escalation) {
        if observation.adapterUsable {
            history.adapterUsableSince = now
            return attemptOrSearch(window: Window(start: now), cause: "\(escalation.step.rawValue) brought the adapter back")
        }
        let applicable = recoverySteps
        let next = escalation.remaining.filter(applicable.contains)
        if !next.isEmpty, !escalation.reconnectRequested { return runRecovery(next, continuing: true) }
        if applicable.isEmpty, observation.adapterPresent, !observation.adapterPowered, observation.radioBlock == .none {
            // Back, but off (a controller re-probed by a USB step comes back
            // unpowered unless bluetoothd's AutoEnable is on).
            return adapterUnusableAfter(escalation.step)
        }
        enter(.waitingForAdapter(offByEscalation: false), "\(adapterProblem) after \(escalation.step.rawValue)")
        guard !applicable.isEmpty else { return }
        let delay = recoveryDelay
        actions.append(.report(.adapterNotRecovered(rounds: history.adapterRecoveries, problem: adapterProblem, retryIn: delay)))
        startTimer(.adapterRecovery, after: delay)
    }

    /// Removes the dongle's object (once per outage) when the window's
    /// failures point at a stale one (`shouldRemoveStaleDevice`).
    private mutating func removeStaleDeviceIfDue(_ window: Window) {
        guard shouldRemoveStaleDevice(window) else { return }
        history.removedStaleDevice = true
        outstanding.removal = true
        actions.append(.report(.staleDeviceRemoved(failures: window.staleFailures, lastError: window.lastStaleError ?? "")))
        actions.append(.removeDevice)
    }

    /// Most of the window's failures pointed at a stale device object, it was
    /// not removed yet in this outage, and the config allows it for this device.
    private func shouldRemoveStaleDevice(_ window: Window) -> Bool {
        guard !history.removedStaleDevice, window.staleFailures > 0, window.staleFailures * 2 >= window.attempts,
              deviceKnown
        else { return false }
        switch settings.staleDeviceRemoval {
        case .never: return false
        // A bond Tether made itself it makes again (`Settings.pairs`): kept,
        // the stale object would refuse every connect for good.
        case .unbonded: return !observation.deviceBonded || settings.pairs
        case .always: return true
        }
    }

    /// The removal's answer. Once done, bluetoothd's InterfacesRemoved takes
    /// the device away (after this reply: BlueZ sends it from an idle
    /// callback) and discovery finds it anew; a failure is only told.
    private mutating func removeDeviceFinished(_ result: Result<Void, LinkFailure>) {
        guard outstanding.removal else { return }
        outstanding.removal = false
        guard case .failure(let failure) = result else {
            if history.bondLoss == .removing { history.bondLoss = .renewed }
            // Removed: an attempt on it now would meet UnknownObject.
            history.deviceObjectGone = observation.devicePresent
            return
        }
        actions.append(.report(.staleDeviceRemovalFailed(error: failure.description)))
    }

    private mutating func enterCooldown(cause: String) {
        startTimer(.retry, after: policy.cooldown)
        if !current.discovering { actions.append(.startDiscovery) }
        let cooldown = Cooldown(discovery: Discovery(running: true), listeningSince: now, blindAttemptAt: now + policy.cooldown)
        enter(.coolingDown(cooldown), "\(cause); connecting when the dongle advertises, blind attempt in \(policy.cooldown.roundedText)")
    }

    private mutating func enterSearching(cause: String) {
        if !current.discovering { actions.append(.startDiscovery) }
        if !outstanding.timers.contains(.searchCheck) { startTimer(.searchCheck, after: searchCheckDelay) }
        // Nobody heard yet in this search: quiet until someone is (then
        // the watch is armed for a stall).
        startTimer(.scanWatch, after: settings.discoveryRenewal)
        enter(.searching(Discovery(running: true), scan: ScanWatch()), "\(cause); the dongle is unknown to bluetoothd, discovering")
    }

    /// The pause before the next controller check while searching, after
    /// `history.searchChecks` of them since the dongle was last found.
    private var searchCheckDelay: Duration {
        pacedDelay(settings.searchControllerCheck, doubled: history.searchChecks)
    }

    /// Searching found nothing for a while: ask the controller. Only a
    /// controller check tells a dongle that sleeps (nothing to do but listen)
    /// from a controller that hears nothing.
    private mutating func searchCheckFired() {
        if case .away(let away) = current, case .listening(let window) = away.phase { return listenedInVain(window) }
        guard current.waitsForAdvertisement else { return }
        if case .searching = current, history.deviceObjectGone {
            // bluetoothd never said the object went, yet it still lists it:
            // not the gone one any more (taken back before its removal was
            // seen), so it is tried.
            history.deviceObjectGone = false
            if observation.devicePresent {
                stopDiscoveryIfRunning()
                return attempt(window: Window(start: now), cause: "the dongle is known to bluetoothd again")
            }
        }
        history.searchChecks += 1
        requestControllerCheck()
        startTimer(.searchCheck, after: searchCheckDelay)
    }

    // MARK: Timers

    private mutating func timerFired(_ timer: SupervisorTimer) {
        guard outstanding.timers.remove(timer) != nil else { return }
        switch timer {
        case .retry:
            switch current {
            case .backingOff(let window, _):
                attempt(window: window, cause: "backoff elapsed")
            case .coolingDown:
                stopDiscoveryIfRunning()
                attempt(window: Window(start: now, blind: true), cause: "cooldown elapsed; blind attempt")
            default:
                break
            }
        case .attemptDeadline:
            switch current {
            case .connecting(let setup, _):
                // A stale-object sign when the Connect lasted the kernel's own
                // LE connection timeout: the kernel ends a connection it is
                // making to a silent peer with le-connection-abort-by-local
                // by then, so one still pending is an object the kernel never
                // even tried (bluetoothd 5.66 in `make e2e`: the dongle back
                // under its address as a random one, the object still public,
                // no LE Create Connection sent). At exactly that timeout (the
                // default) the kernel may be about to answer, but its answer,
                // abort-by-local, is the same sign. A shorter timeout proves
                // nothing: it also cuts off attempts on a dongle that merely
                // does not accept yet.
                let neverTried = policy.connectTimeout >= Self.kernelLEConnectionTimeout
                attemptFailed(
                    setup.window,
                    LinkFailure(
                        .needsCancel, "no connection within \(policy.connectTimeout.roundedText)", staleDevice: neverTried,
                        noAnswer: true),
                    cancel: true
                )
            case .pairing(let setup, _):
                attemptFailed(setup.window, LinkFailure(.needsCancel, "pairing did not finish within \(settings.pairingTimeout.roundedText)"), cancel: true)
            case .resolving(let setup), .subscribing(let setup, _):
                let why = observation.gattProblem.map { ": \($0)" } ?? ""
                attemptFailed(setup.window, LinkFailure(.transient, "services not ready within \(policy.connectTimeout.roundedText)\(why)"), cancel: true)
            default:
                break
            }
        case .keepalive:
            poll()
        case .silence:
            silenceTimerFired()
        case .pollDeadline:
            guard let session = current.session, session.pollInFlight != nil else { return }
            _ = withSession { $0.pollInFlight = nil }
            pollFailed("no reply within \(settings.keepaliveTimeout.roundedText)")
        case .discoveryRetry:
            startDiscoveryIfStopped()
        case .searchCheck:
            searchCheckFired()
        case .scanWatch:
            scanWatchFired()
        case .adapterRecovery:
            guard case .waitingForAdapter = current else { return }
            runRecovery(recoverySteps)
        case .powerOn:
            guard case .waitingForAdapter(offByEscalation: true) = current, observation.adapterPresent else { return }
            actions.append(.powerOn)
            history.powerOnRetries += 1
            startTimer(.powerOn, after: powerOnDelay)
        case .disconnectDeadline:
            guard case .awaitingDisconnect(let wait) = current else { return }
            scheduleAttempt(
                window: windowAfterLoss(wait.window, requested: wait.requested),
                cause: "\(wait.cause); " + (wait.requested ? "disconnect not confirmed" : "bluetoothd still shows the link up"))
        }
    }

    private mutating func startTimer(_ timer: SupervisorTimer, after delay: Duration) {
        outstanding.timers.insert(timer)
        actions.append(.startTimer(timer, after: delay))
    }

    private mutating func cancelTimer(_ timer: SupervisorTimer) {
        guard outstanding.timers.remove(timer) != nil else { return }
        actions.append(.cancelTimer(timer))
    }

    // MARK: Manual reconnect

    private mutating func reconnectRequested() {
        outstanding.reconnectAnswer = true
        switch current {
        case .waitingForBluez:
            actions.append(.answerReconnect(.notReady("bluetoothd is not running")))
        case .waitingForAdapter:
            let steps = recoverySteps
            actions.append(.answerReconnect(.notReady(steps.isEmpty ? adapterProblem : "\(adapterProblem); recovering it now")))
            // A person asked: the next recovery round need not wait its pace.
            if !steps.isEmpty {
                cancelTimer(.adapterRecovery)
                runRecovery(steps)
            }
        case .online, .waitingForData, .subscribing, .pairing, .resolving:
            history.shortSessions = 0
            // A person's request starts a fresh window.
            forceReconnect(cause: "reconnect requested", window: nil)
        case .connecting(var setup, let connect):
            // The attempt in flight becomes the first of a fresh window.
            history.shortSessions = 0
            setup.window = Window(start: now, attempts: 1)
            current = .connecting(setup, connect: connect)
        case .escalating(var escalation):
            // The step may have the adapter off right now.
            escalation.reconnectRequested = true
            current = .escalating(escalation)
        case .awaitingDisconnect:
            break  // already reconnecting
        case .backingOff, .coolingDown, .searching, .away:
            history.shortSessions = 0
            cancelTimer(.retry)
            stopDiscoveryIfRunning()
            attempt(window: Window(start: now), cause: "reconnect requested")
        }
    }

    private mutating func discoveryFailed(_ failure: LinkFailure) {
        guard var discovery = current.discovery, discovery.running else { return }
        discovery.running = false
        discovery.failures += 1
        setDiscovery(discovery)
        actions.append(.report(.discoveryFailed(error: failure.description)))
        // Doubling: a refusal that lasts costs a journal line a minute, not
        // one every 5 s.
        startTimer(
            .discoveryRetry,
            after: pacedDelay(settings.discoveryRetry, doubled: discovery.failures - 1, cap: settings.discoveryRetryCap))
    }

    // MARK: Helpers

    private mutating func nextOperation() -> Int {
        history.operations += 1
        return history.operations
    }

    /// Cancels the timers of a live link: polls, attempt deadline, silence.
    /// (Its data goes with the current the caller enters next.)
    private mutating func stopLinkActivity() {
        cancelTimer(.keepalive)
        cancelTimer(.pollDeadline)
        cancelTimer(.attemptDeadline)
        cancelTimer(.silence)
    }

    /// bluetoothd or the adapter went away: everything in flight is void and
    /// every session (discovery included) is gone with it. The caller enters
    /// the current that waits for them.
    private mutating func linkGoneQuietly() {
        if case .online = current { actions.append(.report(.disconnected(unexpected: true))) }
        stopLinkActivity()
        for timer in SupervisorTimer.allCases { cancelTimer(timer) }
    }

    private mutating func setDiscovery(running: Bool) {
        guard var discovery = current.discovery else { return }
        discovery.running = running
        setDiscovery(discovery)
    }

    private mutating func setDiscovery(_ discovery: Discovery) {
        switch current {
        case .searching(_, let scan): current = .searching(discovery, scan: scan)
        case .coolingDown(var cooldown):
            cooldown.discovery = discovery
            current = .coolingDown(cooldown)
        case .away(var away):
            away.discovery = discovery
            current = .away(away)
        default: break
        }
    }

    /// After StartDiscovery failed, while searching or cooling down.
    private mutating func startDiscoveryIfStopped() {
        switch current {
        case .searching, .coolingDown, .away:
            guard !current.discovering else { return }
            setDiscovery(running: true)
            actions.append(.startDiscovery)
        default:
            break
        }
    }

    private mutating func setScanWatch(_ scan: ScanWatch) {
        switch current {
        case .searching(let discovery, _): current = .searching(discovery, scan: scan)
        case .away(var away):
            away.scan = scan
            current = .away(away)
        default: break
        }
    }

    private mutating func stopDiscoveryIfRunning() {
        guard current.discovering else { return }
        setDiscovery(running: false)
        actions.append(.stopDiscovery)
    }

    private mutating func enter(_ next: State, _ cause: String) {
        let previous = current.name
        // The search's own timer goes with it (away shares it), and the scan watch.
        if current.waitsForAdvertisement, !next.waitsForAdvertisement {
            cancelTimer(.searchCheck)
            cancelTimer(.scanWatch)
        }
        // A link that was up is the last time the dongle was seen.
        if previous == .online || previous == .waitingForData, next.name != previous { history.lastSeen = now }
        current = next
        actions.append(.transition(from: previous, to: next.name, cause: cause))
    }
}
