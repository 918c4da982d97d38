/// The supervisor: keeps the dongle connected, subscribed and polled.
///
/// Pure logic with no I/O and no clock of its own: the adapter layer feeds it
/// events together with the current monotonic time, and carries out the
/// actions it returns (calls to BlueZ, timers). Unit tests drive it on a
/// virtual clock.
///
/// Invariants:
/// - at most one connect, one subscribe and one poll are in flight, each
///   tagged with an id; results for anything else are stale and ignored;
/// - no connect attempt is made while bluetoothd is away or the adapter off;
/// - a retry window never exceeds `windowAttempts` attempts nor `window` time,
///   and an exhausted window always leads to cooling down, never to silence;
/// - every state change comes with a `.transition` action naming its cause;
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
        /// Wait before trying discovery again after it failed to start.
        public var discoveryRetry: Duration = .seconds(5)
        /// How often to power the adapter on again after an escalation left it off.
        public var powerOnRetry: Duration = .seconds(10)
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

        public init() {}
    }

    private struct Window {
        var start: Duration
        var attempts = 0
        /// Failed attempts whose error pointed at a stale device object.
        var staleFailures = 0
        var lastStaleError: String?
    }

    public let settings: Settings
    public private(set) var observation = LinkObservation()
    public private(set) var status = Status()
    public var state: SupervisorState { status.state }

    private var window: Window?
    private var blindAttempt = false
    /// The device object was removed since the link was last online: the
    /// next exhausted window escalates instead (one removal per outage).
    private var removedStaleDevice = false
    /// RemoveDevice is in flight; the window that asked for it is over.
    private var removalInFlight = false
    private var hasBeenOnline = false
    private var operationCounter = 0
    private var connectInFlight: Int?
    private var subscribeInFlight: Int?
    private var pollInFlight: Int?
    private var failedPolls = 0
    private var discovering = false
    private var pendingEscalation: [EscalationStep] = []
    private var escalationInFlight: EscalationStep?
    /// Set while we wait for bluetoothd to report the link down: after we
    /// asked for a disconnect, or after the notification socket closed.
    private var awaitingDisconnect: AwaitedDisconnect?

    private struct AwaitedDisconnect {
        var cause: String
        /// We asked for it (a forced reconnect): its confirmation is the
        /// expected disconnect. Otherwise the loss was reported when noticed.
        var requested: Bool
    }
    /// Since when discovery has been listening in this cooldown, and when the
    /// dongle was last seen advertising.
    private var listeningSince: Duration?
    private var lastAdvertisement: Duration?
    /// Online sessions in a row that ended sooner than `stableLink`.
    private var shortSessions = 0
    /// The current attempt saw Connected=true (the Connect reply and the
    /// property change reach us by different paths, in either order).
    private var connectedSeen = false
    /// Someone asked for a reconnect and waits to hear that its attempt
    /// started (`.answerReconnect`), or why none can.
    private var reconnectAwaitingAttempt = false
    /// A reconnect was asked for while an escalation step ran.
    private var reconnectAfterEscalation = false
    /// The adapter is off because an escalation step left it off.
    private var adapterOffByEscalation = false
    /// The link stayed up while its GATT objects moved: coming online
    /// again is a re-subscription, not a reconnect.
    private var resubscribing = false
    /// The last notification of the current link session (from its connect
    /// attempt on), and when the session was subscribed: the silence timer's
    /// references.
    private var lastDataAt: Duration?
    private var subscribedAt: Duration?
    private var activeTimers: Set<SupervisorTimer> = []
    private var random: SplitMix64
    private var now: Duration = .zero
    private var actions: [SupervisorAction] = []

    public init(settings: Settings, seed: UInt64) {
        self.settings = settings
        random = SplitMix64(seed: seed)
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
        case .connectFinished(let id, let result): connectFinished(id, result)
        case .subscribeFinished(let id, let result): subscribeFinished(id, result)
        case .pollFinished(let id, let result): pollFinished(id, result)
        case .escalationFinished(let step, let result): escalationFinished(step, result)
        case .discoveryFailed(let failure): discoveryFailed(failure)
        case .timerFired(let timer): timerFired(timer)
        case .notificationsEnded(let why): notificationsEnded(why)
        case .reconnectRequested: reconnectRequested()
        case .dataReceived: dataReceived()
        case .characteristicsChanged: characteristicsChanged()
        case .removeDeviceFinished(let result): removeDeviceFinished(result)
        }
        answerReconnectIfDecided()
        return actions
    }

    /// A waiting reconnect request is answered once: when a connect attempt
    /// starts, or when bluetoothd or the adapter goes away first.
    private mutating func answerReconnectIfDecided() {
        guard reconnectAwaitingAttempt else { return }
        if actions.contains(where: { if case .answerReconnect = $0 { true } else { false } }) {
            reconnectAwaitingAttempt = false
        } else if actions.contains(where: { if case .connect = $0 { true } else { false } }) {
            reconnectAwaitingAttempt = false
            actions.append(.answerReconnect(.started(attempt: status.windowAttempt)))
        } else if state == .waitingForBluez {
            reconnectAwaitingAttempt = false
            actions.append(.answerReconnect(.notReady("bluetoothd went away")))
        } else if state == .waitingForAdapter {
            reconnectAwaitingAttempt = false
            actions.append(.answerReconnect(.notReady("the adapter went away or was powered off")))
        }
    }

    // MARK: Observations

    private mutating func observe(_ new: LinkObservation) {
        let old = observation
        observation = new

        if !new.bluezPresent {
            guard state != .waitingForBluez else { return }
            if old.bluezPresent { actions.append(.report(.bluezVanished)) }
            linkGoneQuietly()
            enter(.waitingForBluez, "bluetoothd is not on the bus")
            return
        }
        // An escalation switches the adapter off and on itself; it is
        // re-evaluated when the step finishes.
        if state == .escalating { return }
        if !new.adapterPresent || !new.adapterPowered {
            guard state != .waitingForAdapter else { return }
            if state != .waitingForBluez { actions.append(.report(.adapterUnavailable)) }
            linkGoneQuietly()
            enter(.waitingForAdapter, new.adapterPresent ? "the adapter is powered off" : "no adapter")
            return
        }

        switch state {
        case .waitingForBluez, .waitingForAdapter:
            adapterOffByEscalation = false
            cancelTimer(.powerOn)
            if state == .waitingForBluez, !old.bluezPresent, hasBeenOnline {
                actions.append(.report(.bluezAppeared))
            }
            openWindow()
            attemptOrSearch(cause: state == .waitingForBluez ? "bluetoothd is on the bus" : "the adapter is powered on")
        case .searching:
            if new.devicePresent {
                stopDiscoveryIfRunning()
                openWindow()
                attempt(cause: "the dongle is known to bluetoothd")
            }
        case .connecting:
            if new.connected { connectedSeen = true }  // the Connect reply decides
        case .resolving:
            if new.connected { connectedSeen = true }
            if !new.connected && (old.connected || connectedSeen) {
                linkLost(cause: "the link dropped while resolving services")
            } else if new.linkReady {
                startSubscribing()
            }
        case .subscribing, .waitingForData, .online:
            if !new.connected { linkLost(cause: "the link dropped") }
        case .backingOff:
            if let awaited = awaitingDisconnect, !new.connected {
                awaitingDisconnect = nil
                cancelTimer(.disconnectDeadline)
                if awaited.requested { actions.append(.report(.disconnected(unexpected: false))) }
                openWindowAfterLoss(requested: awaited.requested)
                scheduleAttempt(cause: awaited.cause)
            }
        case .coolingDown, .escalating:
            break
        }
    }

    private mutating func dongleAdvertising() {
        let silentSince = lastAdvertisement ?? listeningSince ?? now
        lastAdvertisement = now
        switch state {
        case .coolingDown:
            // Seen again after a silence: it woke up (or was woken).
            guard observation.devicePresent, now - silentSince >= settings.advertisingSilence else { return }
            cancelTimer(.retry)
            stopDiscoveryIfRunning()
            blindAttempt = false
            openWindow()
            attempt(cause: "the dongle is advertising")
        default:
            break
        }
    }

    // MARK: Attempts

    private mutating func openWindow() {
        window = Window(start: now)
        blindAttempt = false
    }

    private mutating func attemptOrSearch(cause: String) {
        if observation.devicePresent {
            scheduleAttempt(cause: cause)
        } else {
            enterSearching(cause: cause)
        }
    }

    /// Schedules the next attempt of the window, or exhausts it.
    private mutating func scheduleAttempt(cause: String) {
        guard let window else { return enterCooldown(cause: cause) }
        if blindAttempt {
            // A blind attempt from cooling down is a single shot.
            return enterCooldown(cause: cause)
        }
        guard policy.windowAllows(attempt: window.attempts, at: now, windowStart: window.start) else {
            return exhaustWindow()
        }
        let n = window.attempts + 1
        let delay = policy.delay(beforeAttempt: n, unit: random.nextUnit())
        if n > 1, now + delay - window.start >= policy.window {
            // The next attempt would fall outside the window: give up on it now
            // rather than idle until then.
            return exhaustWindow()
        }
        if delay <= .zero {
            attempt(cause: cause)
        } else {
            status.nextAttemptAt = now + delay
            startTimer(.retry, after: delay)
            enter(.backingOff, "\(cause); attempt \(n) in \(delay.roundedText)")
        }
    }

    private mutating func attempt(cause: String) {
        guard observation.adapterUsable else {
            linkGoneQuietly()
            return enter(.waitingForAdapter, "\(cause); but the adapter is not powered")
        }
        guard observation.devicePresent else { return enterSearching(cause: cause) }
        connectedSeen = observation.connected
        resubscribing = false
        lastDataAt = nil
        if window == nil { openWindow() }
        window?.attempts += 1
        let n = window?.attempts ?? 1
        operationCounter += 1
        connectInFlight = operationCounter
        status.windowAttempt = n
        status.nextAttemptAt = nil
        actions.append(.report(.reconnectAttempt(attempt: n, blind: blindAttempt)))
        enter(.connecting, "\(cause); attempt \(n)")
        actions.append(.connect(attempt: operationCounter, timeout: policy.connectTimeout))
        startTimer(.attemptDeadline, after: policy.connectTimeout)
    }

    private mutating func connectFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard id == connectInFlight, state == .connecting else { return }
        connectInFlight = nil
        switch result {
        case .success:
            if observation.linkReady {
                startSubscribing()
            } else if connectedSeen && !observation.connected {
                linkLost(cause: "the link dropped right after connecting")
            } else {
                enter(.resolving, "connected; waiting for services")
            }
        case .failure(let failure):
            attemptFailed(failure, cancel: failure.kind == .needsCancel)
        }
    }

    /// Linux's LE connection timeout (HCI_LE_CONN_TIMEOUT, 20 s): a Connect
    /// the kernel makes ends by then, connected or not.
    static let kernelLEConnectionTimeout: Duration = .seconds(20)

    private mutating func attemptFailed(_ failure: LinkFailure, cancel: Bool) {
        cancelTimer(.attemptDeadline)
        status.lastError = failure.description
        if failure.staleDevice {
            window?.staleFailures += 1
            window?.lastStaleError = failure.description
        }
        actions.append(.report(.attemptFailed(attempt: window?.attempts ?? 0, error: failure.description)))
        if cancel { actions.append(.disconnect) }
        if failure.kind == .fatal {
            window = nil
            return enterCooldown(cause: "error that retrying soon will not fix: \(failure.description)")
        }
        scheduleAttempt(cause: "attempt failed: \(failure.description)")
    }

    private mutating func startSubscribing(cause: String = "services resolved") {
        operationCounter += 1
        subscribeInFlight = operationCounter
        enter(.subscribing, cause)
        actions.append(.subscribe(attempt: operationCounter))
    }

    private mutating func subscribeFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard id == subscribeInFlight, state == .subscribing else { return }
        subscribeInFlight = nil
        switch result {
        case .success:
            subscribed()
        case .failure(let failure):
            attemptFailed(failure, cancel: true)
        }
    }

    /// Subscribed: online at once without a silence limit; with one, only
    /// once data flows (it may have come already: bluetoothd re-arms its
    /// notify sessions on reconnect, before we subscribe again).
    private mutating func subscribed() {
        guard let limit = settings.silenceLimit else { return goOnline() }
        subscribedAt = now
        startTimer(.silence, after: limit)
        if lastDataAt != nil { return goOnline() }
        // The silence timer bounds this wait; the attempt's deadline is done.
        cancelTimer(.attemptDeadline)
        failedPolls = 0
        stopDiscoveryIfRunning()
        enter(.waitingForData, "subscribed; waiting for the first notification (silence limit \(limit.roundedText))")
        if settings.keepaliveEnabled { poll() }
    }

    /// The hot path: at most once per loop turn while notifications flow.
    private mutating func dataReceived() {
        switch state {
        case .online:
            lastDataAt = now
        case .connecting, .resolving, .subscribing:
            lastDataAt = now
        case .waitingForData:
            lastDataAt = now
            goOnline()
        default:
            break
        }
    }

    private mutating func goOnline() {
        cancelTimer(.attemptDeadline)
        let attempts = window?.attempts ?? 0
        window = nil
        blindAttempt = false
        if hasBeenOnline && !resubscribing { status.reconnects += 1 }
        resubscribing = false
        hasBeenOnline = true
        removedStaleDevice = false
        status.windowAttempt = 0
        status.nextAttemptAt = nil
        status.connectedSince = now
        let wasPolling = state == .waitingForData
        if !wasPolling { failedPolls = 0 }
        stopDiscoveryIfRunning()
        actions.append(.report(.connected(attempt: attempts)))
        enter(.online, wasPolling ? "data flows" : settings.silenceLimit == nil ? "subscribed" : "subscribed; data flows")
        // The first poll goes out at once: the dongle's idle clock has run
        // since the connect, and resolving services can take seconds.
        if settings.keepaliveEnabled && !wasPolling { poll() }
    }

    /// The link went down while it was up or coming up. A drop while coming
    /// up is a failed attempt of the current window; a drop from online opens
    /// a new window, whose first attempt comes at once unless the link has
    /// been flapping.
    private mutating func linkLost(cause: String) {
        let wasOnline = countSession()
        stopLinkActivity()
        actions.append(.report(.disconnected(unexpected: true)))
        if wasOnline {
            openWindowAfterLoss(requested: false)
        } else if window == nil {
            openWindow()
        }
        scheduleAttempt(cause: cause)
    }

    /// Counts a session that ends now against `stableLink`; false if the link
    /// was not online (it was still coming up).
    private mutating func countSession() -> Bool {
        guard let onlineSince = status.connectedSince else { return false }
        shortSessions = now - onlineSince < settings.stableLink ? shortSessions + 1 : 0
        return true
    }

    /// A new window after a loss: a flapping link's drops count as failed
    /// attempts of it; a drop we asked for does not. A link that never
    /// carried data keeps the window of the attempt that brought it up.
    private mutating func openWindowAfterLoss(requested: Bool) {
        guard window == nil else { return }
        openWindow()
        if !requested { window?.attempts = max(0, shortSessions - 1) }
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
        if state == .subscribing || state == .waitingForData { return linkLost(cause: why) }
        guard state == .online else { return }
        _ = countSession()
        stopLinkActivity()
        actions.append(.report(.disconnected(unexpected: true)))
        awaitingDisconnect = AwaitedDisconnect(cause: why, requested: false)
        startTimer(.disconnectDeadline, after: settings.linkLossConfirmation)
        enter(.backingOff, "\(why); waiting for bluetoothd to report the link down")
    }

    // MARK: Keep-alive

    private mutating func poll() {
        guard linkIsUp else { return }
        // Fixed rate: the next poll is due one interval after this one
        // started, whatever this one takes.
        startTimer(.keepalive, after: settings.keepaliveInterval)
        if pollInFlight != nil { return }  // the deadline will judge it
        operationCounter += 1
        pollInFlight = operationCounter
        actions.append(.poll(operationCounter, timeout: settings.keepaliveTimeout))
        startTimer(.pollDeadline, after: settings.keepaliveTimeout)
    }

    private mutating func pollFinished(_ id: Int, _ result: Result<Void, LinkFailure>) {
        guard id == pollInFlight else { return }
        pollInFlight = nil
        cancelTimer(.pollDeadline)
        switch result {
        case .success: failedPolls = 0
        case .failure(let failure): pollFailed(failure.description)
        }
    }

    private mutating func pollFailed(_ error: String) {
        guard linkIsUp else { return }
        failedPolls += 1
        status.lastError = "keep-alive: \(error)"
        actions.append(.report(.linkCheckFailed(consecutive: failedPolls, error: error)))
        if failedPolls >= settings.failedPollsBeforeReconnect {
            forceReconnect(cause: "\(failedPolls) keep-alive polls failed in a row")
        }
    }

    /// Drops a link that is up (or thought to be) and reconnects once
    /// bluetoothd confirms the disconnect, or after a deadline.
    private mutating func forceReconnect(cause: String) {
        stopLinkActivity()
        awaitingDisconnect = AwaitedDisconnect(cause: cause, requested: true)
        actions.append(.disconnect)
        startTimer(.disconnectDeadline, after: policy.connectTimeout)
        enter(.backingOff, "\(cause); disconnecting")
    }

    // MARK: A changed GATT database

    /// Subscribes again on the new objects, or waits (bounded by the attempt
    /// deadline) for them to be exported. A failure from here on is a failed
    /// attempt of a window, as for any link coming up.
    private mutating func characteristicsChanged() {
        guard linkIsUp || state == .subscribing || state == .resolving else { return }
        stopLinkActivity()
        resubscribing = true
        if window == nil {
            openWindow()
            window?.attempts = 1
        }
        startTimer(.attemptDeadline, after: policy.connectTimeout)
        if observation.linkReady {
            startSubscribing(cause: "the dongle's GATT database changed; subscribing again")
        } else {
            enter(.resolving, "the dongle's GATT database changed; waiting for its characteristics")
        }
    }

    // MARK: Silence

    /// Subscribed, and the keep-alive and the silence limit running.
    private var linkIsUp: Bool { state == .online || state == .waitingForData }

    /// The silence timer fired: judge the time since the last notification
    /// (or since the subscription, if none came) and re-arm for the rest.
    private mutating func silenceTimerFired() {
        guard let limit = settings.silenceLimit, linkIsUp, let subscribedAt else { return }
        let reference = max(lastDataAt ?? subscribedAt, subscribedAt)
        let silent = now - reference
        guard silent >= limit else { return startTimer(.silence, after: limit - silent) }
        let proven = state == .online
        let what = proven
            ? "no notification for \(silent.roundedText) (silence limit \(limit.roundedText))"
            : "no notification within \(silent.roundedText) of subscribing (silence limit \(limit.roundedText))"
        status.silenceEvents += 1
        status.lastError = what
        actions.append(.report(.silence(silentFor: silent, limit: limit, proven: proven)))
        if !proven {
            // The attempt that brought the link up never carried data: it
            // failed, and its window (still open) goes on.
            actions.append(.report(.attemptFailed(attempt: window?.attempts ?? 0, error: what)))
        }
        forceReconnect(cause: what)
    }

    // MARK: Escalation and cooldown

    private mutating func exhaustWindow() {
        let attempts = window?.attempts ?? 0
        let exhausted = window
        window = nil
        status.windowAttempt = 0
        actions.append(.report(.windowExhausted(attempts: attempts)))
        if let exhausted, shouldRemoveStaleDevice(exhausted) {
            removedStaleDevice = true
            removalInFlight = true
            actions.append(.report(.staleDeviceRemoved(failures: exhausted.staleFailures, lastError: exhausted.lastStaleError ?? "")))
            // Then as after any exhausted window: the escalation steps, or
            // cooling down. Either way discovery makes the object anew once
            // the dongle advertises, and the next window starts from it.
            actions.append(.removeDevice)
        }
        pendingEscalation = settings.escalation
        runNextEscalation()
    }

    private mutating func runNextEscalation() {
        guard !pendingEscalation.isEmpty else {
            if settings.escalation.isEmpty { return enterCooldown(cause: "retry window exhausted") }
            openWindow()
            if reconnectAfterEscalation {
                reconnectAfterEscalation = false
                return attempt(cause: "reconnect requested")
            }
            // See at once whether the escalation helped: one attempt, then cool down.
            blindAttempt = true
            return attempt(cause: "escalation done")
        }
        let step = pendingEscalation.removeFirst()
        escalationInFlight = step
        enter(.escalating, "retry window exhausted; \(step.rawValue)")
        actions.append(.escalate(step))
    }

    private mutating func escalationFinished(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) {
        guard state == .escalating, escalationInFlight == step else { return }
        escalationInFlight = nil
        if reconnectAfterEscalation { pendingEscalation = [] }
        switch result {
        case .success: actions.append(.report(.escalation(step, outcome: "done")))
        case .failure(let failure): actions.append(.report(.escalation(step, outcome: failure.description)))
        }
        if !observation.bluezPresent {
            linkGoneQuietly()
            return enter(.waitingForBluez, "bluetoothd is not on the bus")
        }
        if !observation.adapterUsable {
            linkGoneQuietly()
            if observation.adapterPresent {
                // We switched it off; nobody else will switch it on.
                adapterOffByEscalation = true
                actions.append(.report(.adapterLeftOff))
                actions.append(.powerOn)
                startTimer(.powerOn, after: settings.powerOnRetry)
            }
            return enter(.waitingForAdapter, "the adapter is not powered after \(step.rawValue)")
        }
        runNextEscalation()
    }

    /// Most of the window's failures pointed at a stale device object, it was
    /// not removed yet in this outage, and the config allows it for this device.
    private func shouldRemoveStaleDevice(_ window: Window) -> Bool {
        guard !removedStaleDevice, window.staleFailures > 0, window.staleFailures * 2 >= window.attempts,
              observation.devicePresent
        else { return false }
        switch settings.staleDeviceRemoval {
        case .never: return false
        case .unbonded: return !observation.deviceBonded
        case .always: return true
        }
    }

    /// The removal's answer. Once done, bluetoothd's InterfacesRemoved takes
    /// the device away and discovery finds it anew; a failure is only told.
    private mutating func removeDeviceFinished(_ result: Result<Void, LinkFailure>) {
        guard removalInFlight else { return }
        removalInFlight = false
        guard case .failure(let failure) = result else { return }
        actions.append(.report(.staleDeviceRemovalFailed(error: failure.description)))
    }

    private mutating func enterCooldown(cause: String) {
        blindAttempt = false
        listeningSince = now
        lastAdvertisement = nil
        status.nextAttemptAt = now + policy.cooldown
        startTimer(.retry, after: policy.cooldown)
        startDiscoveryIfStopped()
        enter(.coolingDown, "\(cause); connecting when the dongle advertises, blind attempt in \(policy.cooldown.roundedText)")
    }

    private mutating func enterSearching(cause: String) {
        startDiscoveryIfStopped()
        enter(.searching, "\(cause); the dongle is unknown to bluetoothd, discovering")
    }

    // MARK: Timers

    private mutating func timerFired(_ timer: SupervisorTimer) {
        guard activeTimers.remove(timer) != nil else { return }
        switch timer {
        case .retry:
            if state == .backingOff {
                attempt(cause: "backoff elapsed")
            } else if state == .coolingDown {
                stopDiscoveryIfRunning()
                openWindow()
                blindAttempt = true
                attempt(cause: "cooldown elapsed; blind attempt")
            }
        case .attemptDeadline:
            switch state {
            case .connecting:
                connectInFlight = nil
                // A stale-object sign when the Connect outlived the kernel's
                // own LE connection timeout: the kernel ends a connection it
                // is making to a silent peer with le-connection-abort-by-local
                // by then, so one still pending is an object the kernel never
                // even tried (bluetoothd 5.66 in `make e2e`: the dongle back
                // under its address as a random one, the object still public,
                // no LE Create Connection sent). A shorter timeout proves
                // nothing: it also cuts off attempts on a dongle that merely
                // does not accept yet.
                let neverTried = policy.connectTimeout > Self.kernelLEConnectionTimeout
                attemptFailed(
                    LinkFailure(.needsCancel, "no connection within \(policy.connectTimeout.roundedText)", staleDevice: neverTried),
                    cancel: true
                )
            case .resolving, .subscribing:
                subscribeInFlight = nil
                let why = observation.gattProblem.map { ": \($0)" } ?? ""
                attemptFailed(LinkFailure(.transient, "services not ready within \(policy.connectTimeout.roundedText)\(why)"), cancel: true)
            default:
                break
            }
        case .keepalive:
            poll()
        case .silence:
            silenceTimerFired()
        case .pollDeadline:
            guard pollInFlight != nil else { return }
            pollInFlight = nil
            pollFailed("no reply within \(settings.keepaliveTimeout.roundedText)")
        case .discoveryRetry:
            if state == .searching || state == .coolingDown { startDiscoveryIfStopped() }
        case .powerOn:
            guard state == .waitingForAdapter, adapterOffByEscalation, observation.adapterPresent else { return }
            actions.append(.powerOn)
            startTimer(.powerOn, after: settings.powerOnRetry)
        case .disconnectDeadline:
            guard let awaited = awaitingDisconnect else { return }
            awaitingDisconnect = nil
            openWindowAfterLoss(requested: awaited.requested)
            scheduleAttempt(cause: "\(awaited.cause); " + (awaited.requested ? "disconnect not confirmed" : "bluetoothd still shows the link up"))
        }
    }

    private mutating func startTimer(_ timer: SupervisorTimer, after delay: Duration) {
        activeTimers.insert(timer)
        actions.append(.startTimer(timer, after: delay))
    }

    private mutating func cancelTimer(_ timer: SupervisorTimer) {
        guard activeTimers.remove(timer) != nil else { return }
        actions.append(.cancelTimer(timer))
    }

    // MARK: Manual reconnect

    private mutating func reconnectRequested() {
        reconnectAwaitingAttempt = true
        switch state {
        case .waitingForBluez:
            return actions.append(.answerReconnect(.notReady("bluetoothd is not running")))
        case .waitingForAdapter:
            let why = observation.adapterPresent ? "the adapter is powered off" : "no Bluetooth adapter"
            return actions.append(.answerReconnect(.notReady(why)))
        case .online, .waitingForData, .subscribing, .resolving:
            shortSessions = 0
            window = nil  // a person's request starts a fresh window
            forceReconnect(cause: "reconnect requested")
        case .connecting:
            shortSessions = 0
            openWindow()
            window?.attempts = 1
        case .escalating:
            reconnectAfterEscalation = true  // the step may have the adapter off right now
        case .backingOff where awaitingDisconnect != nil:
            return  // already reconnecting
        case .backingOff, .coolingDown, .searching:
            shortSessions = 0
            cancelTimer(.retry)
            stopDiscoveryIfRunning()
            openWindow()
            attempt(cause: "reconnect requested")
        }
    }

    private mutating func discoveryFailed(_ failure: LinkFailure) {
        guard discovering else { return }
        discovering = false
        actions.append(.report(.discoveryFailed(error: failure.description)))
        if state == .searching || state == .coolingDown {
            startTimer(.discoveryRetry, after: settings.discoveryRetry)
        }
    }

    // MARK: Helpers

    /// Cancels what belongs to a live link: polls, subscribe, attempt deadline.
    private mutating func stopLinkActivity() {
        cancelTimer(.keepalive)
        cancelTimer(.pollDeadline)
        cancelTimer(.attemptDeadline)
        cancelTimer(.silence)
        pollInFlight = nil
        subscribeInFlight = nil
        connectInFlight = nil
        lastDataAt = nil
        subscribedAt = nil
        status.connectedSince = nil
    }

    /// bluetoothd or the adapter went away: everything in flight is void and
    /// every session (discovery included) is gone with it.
    private mutating func linkGoneQuietly() {
        if status.connectedSince != nil { actions.append(.report(.disconnected(unexpected: true))) }
        stopLinkActivity()
        for timer in SupervisorTimer.allCases { cancelTimer(timer) }
        window = nil
        blindAttempt = false
        discovering = false
        pendingEscalation = []
        escalationInFlight = nil
        awaitingDisconnect = nil
        status.windowAttempt = 0
        status.nextAttemptAt = nil
    }

    private mutating func startDiscoveryIfStopped() {
        guard !discovering else { return }
        discovering = true
        actions.append(.startDiscovery)
    }

    private mutating func stopDiscoveryIfRunning() {
        guard discovering else { return }
        discovering = false
        actions.append(.stopDiscovery)
    }

    private mutating func enter(_ next: SupervisorState, _ cause: String) {
        let previous = status.state
        status.state = next
        actions.append(.transition(from: previous, to: next, cause: cause))
    }
}
