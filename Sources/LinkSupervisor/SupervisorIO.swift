import LinkPolicy

/// A failed operation, as the adapter layer reports it to the supervisor.
///
/// Its kinds mirror `BlueZError.Disposition` on purpose: the supervisor is
/// pure logic and does not import the BlueZ client; the adapter layer maps
/// one onto the other.
public struct LinkFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Try again later.
        case transient
        /// Cancel the stale operation (Device1.Disconnect), then try again.
        case needsCancel
        /// Will not get better by retrying soon.
        case fatal
    }

    public var kind: Kind
    public var description: String
    /// The error points at a stale device object in bluetoothd (see
    /// `BlueZError.pointsAtStaleDevice`).
    public var staleDevice: Bool
    /// Nobody answered the connect: the kernel gave up on a peer that never
    /// answered (`le-connection-abort-by-local`, `le-connection-timeout`),
    /// or Tether's own deadline passed first. What a dongle that is away
    /// gives, and also a stale object or a wedged controller: a window of
    /// these counts as "away" only beside evidence that the controller works
    /// (`Supervisor.controllerEvidence`).
    public var noAnswer: Bool
    /// bluetoothd has no such object any more (`UnknownObject`): the dongle
    /// is unknown until discovery finds it again, whatever the last
    /// observation says (bluetoothd sends `InterfacesRemoved` after the
    /// reply to the `RemoveDevice` that removed it).
    public var deviceGone: Bool
    /// A pairing that succeeded without authenticating the dongle (with a
    /// passkey configured, Just Works went through): the bond is not to be
    /// used, and is removed (`Supervisor.pairFinished`).
    public var unauthenticatedBond: Bool

    public init(
        _ kind: Kind, _ description: String, staleDevice: Bool = false, deviceGone: Bool = false,
        unauthenticatedBond: Bool = false, noAnswer: Bool = false
    ) {
        self.kind = kind
        self.description = description
        self.noAnswer = noAnswer
        self.staleDevice = staleDevice
        self.deviceGone = deviceGone
        self.unauthenticatedBond = unauthenticatedBond
    }
}

/// Timers the supervisor asks for; at most one of each runs at a time.
public enum SupervisorTimer: String, Sendable, CaseIterable {
    /// The next attempt of a window, or the blind attempt of a cooldown.
    case retry
    /// Caps a connect attempt (and the resolve that follows) at
    /// `connect_timeout`, and a pairing at `Settings.pairingTimeout`.
    case attemptDeadline
    /// The next keep-alive poll.
    case keepalive
    /// Caps a poll at `keepalive.timeout`.
    case pollDeadline
    /// Caps the wait for bluetoothd to confirm a link loss: after a forced
    /// disconnect, or after the notification socket closed.
    case disconnectDeadline
    /// Tries discovery again after StartDiscovery failed.
    case discoveryRetry
    /// Asks the controller whether it answers while searching finds nothing.
    case searchCheck
    /// Powers the adapter on again after an escalation left it off.
    case powerOn
    /// The next adapter recovery round (rfkill unblock, USB reset or rebind)
    /// while the adapter stays unusable; its delay grows each round.
    case adapterRecovery
    /// The silence limit: no notification for this long while subscribed
    /// means the dongle's application no longer works. Started when the
    /// link is subscribed and re-armed lazily: readings do not restart it,
    /// the supervisor looks at the last one when it fires.
    case silence
    /// While away: whether the scan still hears anyone (re-armed lazily,
    /// like `silence`), and when to renew the discovery session.
    case scanWatch
}

extension SupervisorTimer {
    /// Its place in `allCases`, 0 to 10: for tables indexed by timer, and
    /// for hashing.
    public var slot: Int {
        switch self {
        case .retry: 0
        case .attemptDeadline: 1
        case .keepalive: 2
        case .pollDeadline: 3
        case .disconnectDeadline: 4
        case .discoveryRetry: 5
        case .searchCheck: 6
        case .powerOn: 7
        case .adapterRecovery: 8
        case .silence: 9
        case .scanWatch: 10
        }
    }

    /// Hashed by `slot`, not by its raw value (the default for an enum with
    /// one): timers are set and cancelled at every keep-alive, and hashing
    /// their names was a measurable part of an idle daemon's work.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(UInt8(truncatingIfNeeded: slot))
    }
}

/// Inputs to the supervisor.
///
/// The answer to a call (an action that is answered) echoes the call's id:
/// the supervisor acts only on the answer its current state waits for, and
/// ignores any other as stale.
public enum SupervisorEvent: Sendable {
    /// The world as seen now (sent whenever it changes).
    case observed(LinkObservation)
    /// The dongle was seen advertising (an RSSI update while discovering).
    case advertising
    /// Some other device was seen advertising: the controller hears the air.
    /// The adapter layer sends it at most every few seconds.
    case othersAdvertising
    case connectFinished(attempt: Int, Result<Void, LinkFailure>)
    case subscribeFinished(attempt: Int, Result<Void, LinkFailure>)
    /// Device1.Pair (and Trusted) returned.
    case pairFinished(attempt: Int, Result<Void, LinkFailure>)
    /// The dongle refused the bond bluetoothd holds for it: the kernel
    /// ended a link for an authentication failure (its Device Disconnected
    /// reason 4, or BlueZ ≥ 5.83's `org.bluez.Reason.Authentication`). A
    /// dongle that lost its keys (a factory reset) does this on every
    /// connect while bluetoothd keeps `Paired`.
    case bondRejected(String)
    case pollFinished(poll: Int, Result<Void, LinkFailure>)
    /// The escalation step asked for by `.escalate(step, run:)` finished.
    case escalationFinished(EscalationStep, run: Int, Result<Void, LinkFailure>)
    /// The StartDiscovery of `.startDiscovery(discovery)` (or its filter)
    /// failed; discovery is not running.
    case discoveryFailed(discovery: Int, LinkFailure)
    case timerFired(SupervisorTimer)
    /// An acquired notification socket reached its end (bluetoothd closes it
    /// when the link goes, when it exits, and on StopNotify): usually the
    /// first sign of a link loss, before bluetoothd's Connected=false.
    case notificationsEnded(String)
    /// A person asked for a reconnect (`tether reconnect`).
    case reconnectRequested
    /// Notifications arrived from the dongle (at most once per loop turn:
    /// the adapter layer coalesces them). Only notifications count: a read
    /// or a write's response can come from the radio's stack while the
    /// dongle's application is hung.
    case dataReceived
    /// The GATT objects Tether uses moved while the link was up: a firmware
    /// update's new layout, announced with a Service Changed indication
    /// (bluetoothd removes the old objects and exports new ones; notify
    /// sessions on the old ones are gone).
    case characteristicsChanged
    /// The Adapter1.RemoveDevice of `.removeDevice(removal)` returned.
    case removeDeviceFinished(removal: Int, Result<Void, LinkFailure>)
    /// The answer to `.checkController(check)`.
    case controllerChecked(check: Int, ControllerCheck)
}

/// Whether the controller itself answers a command (`.checkController`).
public enum ControllerCheck: Sendable, Equatable {
    case responsive
    /// It did not answer in time: a wedged controller.
    case unresponsive(String)
    /// The check could not be made here (no Bluetooth in this kernel, no
    /// such controller): it proves nothing either way.
    case unknown(String)
}

/// Something notable for the logs and metrics (journald's TETHER_EVENT).
public enum SupervisorReport: Sendable, Equatable {
    case connected(attempt: Int)
    case disconnected(unexpected: Bool)
    case reconnectAttempt(attempt: Int, blind: Bool)
    case attemptFailed(attempt: Int, error: String)
    case windowExhausted(attempts: Int)
    case escalation(EscalationStep, outcome: String)
    case bluezVanished
    case bluezAppeared
    case adapterUnavailable
    case linkCheckFailed(consecutive: Int, error: String)
    case discoveryFailed(error: String)
    /// An escalation left the adapter powered off; the supervisor keeps powering it on.
    case adapterLeftOff
    /// No notification for `silentFor` (at least `limit`) while subscribed:
    /// the link is taken for dead. `proven`: data had flowed in this session
    /// (a hang after working); otherwise the attempt never produced any.
    case silence(silentFor: Duration, limit: Duration, proven: Bool)
    /// A retry window failed with errors that point at a stale device
    /// object: it is removed and the dongle discovered again.
    case staleDeviceRemoved(failures: Int, lastError: String)
    case staleDeviceRemovalFailed(error: String)
    /// rfkill blocked the adapter's controller, or the block changed kind.
    case radioBlocked(RadioBlock)
    /// The rfkill block on the adapter's controller lifted.
    case radioUnblocked
    /// A round of adapter recovery steps left the adapter unusable; the
    /// next round is in `retryIn`.
    case adapterNotRecovered(rounds: Int, problem: String, retryIn: Duration)
    /// The controller did not answer a command of its own while connects
    /// failed: wedged, whatever bluetoothd's `Powered` says.
    case controllerUnresponsive(String)
    /// The controller did not answer in time while waiting on discovery,
    /// but other devices' advertisements came through it `heardAgo`: it
    /// works (a command answered late under load is no lockup); the next
    /// check asks again.
    case controllerSlow(String, heardAgo: Duration)
    /// Device1.Pair succeeded: the dongle is bonded (and trusted).
    case paired
    /// The dongle is away: a retry window found nobody while the controller
    /// works (`evidence` says how that shows). `lastSeen`: when the link
    /// was last up or the dongle last advertised, on the supervisor's clock
    /// (nil: not since Tether started).
    case dongleAway(lastSeen: Duration?, evidence: String)
    /// The dongle advertises again after being away for `awayFor`.
    case dongleBack(awayFor: Duration)
    /// While away, the scan that heard other devices heard nobody for
    /// `silentFor`: a stalled scan (bluetoothd keeps `Discovering`).
    /// `restarting`: discovery is started again; otherwise that did not
    /// help and the controller steps run.
    case scanStalled(silentFor: Duration, restarting: Bool)
    /// `unauthenticated`: Device1.Pair succeeded without the passkey (Just
    /// Works): the bond is removed and the link not used.
    case pairingFailed(error: String, unauthenticated: Bool = false)
    /// The dongle refused its bond (`detail` says how that showed). With
    /// `repairing`, Tether removes the device object (and its keys) to pair
    /// again; otherwise `why` says why it does not.
    case bondLost(detail: String, repairing: Bool, why: String?)

    /// The journald TETHER_EVENT value.
    public var eventName: String {
        switch self {
        case .connected: "connected"
        case .disconnected: "disconnected"
        case .reconnectAttempt: "reconnect-attempt"
        case .attemptFailed: "attempt-failed"
        case .windowExhausted: "window-exhausted"
        case .escalation: "escalation"
        case .bluezVanished: "bluez-vanished"
        case .bluezAppeared: "bluez-restarted"
        case .adapterUnavailable: "adapter-unavailable"
        case .linkCheckFailed: "link-check-failed"
        case .discoveryFailed: "discovery-failed"
        case .adapterLeftOff: "adapter-left-off"
        case .silence: "silence"
        case .staleDeviceRemoved: "device-removed"
        case .staleDeviceRemovalFailed: "device-removal-failed"
        case .radioBlocked: "rfkill-blocked"
        case .radioUnblocked: "rfkill-unblocked"
        case .adapterNotRecovered: "adapter-not-recovered"
        case .controllerUnresponsive: "controller-unresponsive"
        case .controllerSlow: "controller-slow"
        case .paired: "paired"
        case .dongleAway: "away"
        case .dongleBack: "back"
        case .scanStalled: "scan-stalled"
        case .pairingFailed: "pairing-failed"
        case .bondLost: "bond-lost"
        }
    }
}

/// Outputs of the supervisor, carried out by the adapter layer in order.
///
/// Every call whose answer comes back as an event carries an id, which the
/// answer echoes (`SupervisorEvent`): `connect`, `subscribe`, `pair`,
/// `poll`, `startDiscovery` (answered only when it fails), `escalate`,
/// `removeDevice`, `checkController`.
public enum SupervisorAction: Sendable, Equatable {
    case connect(attempt: Int, timeout: Duration)
    /// Device1.Disconnect: cancels a pending connect or drops the link.
    case disconnect
    case subscribe(attempt: Int)
    /// Device1.Pair with Tether's agent, then Trusted = true; answered by
    /// `.pairFinished`.
    case pair(attempt: Int, timeout: Duration)
    /// A keep-alive poll answered by `.pollFinished`, or by the
    /// `.pollDeadline` timer.
    case poll(Int, timeout: Duration)
    /// A keep-alive write sent without asking bluetoothd for an answer
    /// (D-Bus NO_REPLY_EXPECTED): nothing reports back.
    case pollWithoutReply
    /// StartDiscovery (with the discovery filter); a failure is answered by
    /// `.discoveryFailed` with this id, a success not at all.
    case startDiscovery(Int)
    case stopDiscovery
    /// Runs an escalation step; answered by `.escalationFinished` with this run.
    case escalate(EscalationStep, run: Int)
    /// Adapter1.Powered = true, after an escalation left the adapter off.
    case powerOn
    /// Adapter1.RemoveDevice of the dongle's device object: a stale one, or
    /// one whose bond the dongle refuses (its keys go with it); answered by
    /// `.removeDeviceFinished` with this id.
    case removeDevice(Int)
    /// Asks the controller itself, below bluetoothd, whether it answers (a
    /// bounded informational HCI command); answered by `.controllerChecked`
    /// with this id.
    case checkController(Int)
    case startTimer(SupervisorTimer, after: Duration)
    case cancelTimer(SupervisorTimer)
    case transition(from: SupervisorState, to: SupervisorState, cause: String)
    case report(SupervisorReport)
    /// The answer to a `.reconnectRequested`: decided here, once.
    case answerReconnect(ReconnectAnswer)
}

extension Supervisor {
    /// Whether a step (`event` handled, `actions` decided) left `status` as
    /// it was, without building it: the keep-alive's own steps (its timer, a
    /// poll's answer or deadline, a turn's notifications) that decided
    /// nothing but timers and polls. Any change they make to the status
    /// comes with a transition or a report. Most of an idle daemon's steps
    /// are these, so its adapter skips its status bookkeeping after them;
    /// DST's `status-told` checks the promise on every step.
    public static func leavesStatusAsItWas(_ event: SupervisorEvent, deciding actions: [SupervisorAction]) -> Bool {
        switch event {
        case .timerFired(.keepalive), .timerFired(.pollDeadline), .pollFinished, .dataReceived, .othersAdvertising: break
        default: return false
        }
        return actions.allSatisfy { action in
            switch action {
            case .startTimer, .cancelTimer, .poll, .pollWithoutReply: true
            default: false
            }
        }
    }
}

/// What became of a reconnect request.
public enum ReconnectAnswer: Sendable, Equatable {
    /// A connect attempt started; its number in the new window.
    case started(attempt: Int)
    /// Nothing to connect with; says why.
    case notReady(String)
}
