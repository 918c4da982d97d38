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
/// state needs (Supervisor+State.swift): online, or an outage with its own
/// facts and the step its recovery is at. One function per input, each
/// adding the actions it decides, in order, to the event's accumulator
/// (`Actions`, passed `inout`), which `handle` returns. Beside the state
/// there are only the settings, the last observation of the world (an
/// input), what outlives every outage (`History`: facts about the past,
/// adapter recovery pacing, the counts `status` shows), the timers armed,
/// and whether a reconnect request still waits for its answer. The handlers
/// live one concern to a file (Supervisor+<concern>.swift).
///
/// Invariants:
/// - every call whose answer comes back as an event (connect, subscribe,
///   pair, poll, StartDiscovery, an escalation step, RemoveDevice, a
///   controller check) carries an id, held only by the state that waits for
///   it (a RemoveDevice and a controller check by the outage); an answer
///   with any other id is stale and ignored. At most one of each is in
///   flight (a stale object's removal supersedes a refused bond's);
/// - going online ends the outage: its facts (a stale object removed, a
///   bond refused or renewed, drops before resolve, search checks) and the
///   answers it waited for are gone, by construction;
/// - a link that is up (waiting for data, or online) has its keep-alive
///   armed, when the settings enable it: a `Session` cannot be made without
///   `startKeepAlive`, which sends the first poll and arms the timer, and
///   each fire of that timer arms it again;
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
///
/// A value type, used by one owner at a time (the daemon's loop, a test, a
/// simulation): no locking.
public struct Supervisor: Sendable {
    /// What the handlers decide, in order: each handler appends to the
    /// accumulator of the one event being handled, which `handle` returns.
    typealias Actions = [SupervisorAction]

    public let settings: Settings
    public internal(set) var observation = LinkObservation()
    /// Where the supervisor is; see `State`. Tether starts in an outage.
    var current: State = .outage(Outage(), .waitingForBluez)
    var history = History()
    /// The timers armed: a fire of any other is stale.
    var armedTimers: Set<SupervisorTimer> = []
    /// A reconnect request waits for its answer (`answerReconnectIfDecided`).
    /// Not a call in flight: the answer goes out, to every request waiting.
    var reconnectAnswerOwed = false
    var random: SplitMix64
    /// The time of the event being handled (an input, set by `handle`).
    var now: Duration = .zero

    public init(settings: Settings, seed: UInt64) {
        self.settings = settings
        random = SplitMix64(seed: seed)
    }

    public var state: SupervisorState { current.name }
    /// A `.checkController` is out and not answered (for tests).
    var pendingControllerCheck: Bool { current.outage?.controllerCheck != nil }
    /// Listening for evidence that the controller works after a window that
    /// found nobody (for tests: it shows as `backingOff`).
    var listeningForEvidence: Bool {
        if case .outage(_, .away(let away)) = current { !away.confirmed } else { false }
    }

    var policy: ReconnectPolicy { settings.policy }

    // MARK: Input

    /// Handles one event at monotonic time `time` and returns what to do, in order.
    public mutating func handle(_ event: SupervisorEvent, at time: Duration) -> [SupervisorAction] {
        now = time
        var actions: Actions = []
        switch event {
        case .observed(let new): observe(new, &actions)
        case .advertising: dongleAdvertising(&actions)
        case .othersAdvertising: othersAdvertising(&actions)
        case .connectFinished(let id, let result): connectFinished(id, result, &actions)
        case .subscribeFinished(let id, let result): subscribeFinished(id, result, &actions)
        case .pairFinished(let id, let result): pairFinished(id, result, &actions)
        case .bondRejected(let detail): bondRejected(detail, &actions)
        case .pollFinished(let id, let result): pollFinished(id, result, &actions)
        case .escalationFinished(let step, let run, let result): escalationFinished(step, run: run, result, &actions)
        case .discoveryFailed(let id, let failure): discoveryFailed(id, failure, &actions)
        case .timerFired(let timer): timerFired(timer, &actions)
        case .notificationsEnded(let why): notificationsEnded(why, &actions)
        case .reconnectRequested: reconnectRequested(&actions)
        case .dataReceived: dataReceived(&actions)
        case .characteristicsChanged: characteristicsChanged(&actions)
        case .removeDeviceFinished(let id, let result): removeDeviceFinished(id, result, &actions)
        case .controllerChecked(let id, let check): controllerChecked(id, check, &actions)
        }
        answerReconnectIfDecided(&actions)
        return actions
    }

    /// A waiting reconnect request is answered once: when a connect attempt
    /// starts, or when bluetoothd or the adapter goes away first.
    private mutating func answerReconnectIfDecided(_ actions: inout Actions) {
        guard reconnectAnswerOwed else { return }
        if actions.contains(where: { if case .answerReconnect = $0 { true } else { false } }) {
            reconnectAnswerOwed = false
        } else if actions.contains(where: { if case .connect = $0 { true } else { false } }) {
            reconnectAnswerOwed = false
            actions.append(.answerReconnect(.started(attempt: current.window?.attempts ?? 0)))
        } else if case .outage(_, .waitingForBluez) = current {
            reconnectAnswerOwed = false
            actions.append(.answerReconnect(.notReady("bluetoothd went away")))
        } else if case .outage(_, .waitingForAdapter) = current {
            reconnectAnswerOwed = false
            actions.append(.answerReconnect(.notReady("the adapter went away or was powered off")))
        }
    }

    // MARK: Transitions and timers

    /// Enters `next`, a step of the outage going on, or of one that begins
    /// now (`beginning`) when the link was online.
    mutating func enter(_ next: Recovery, _ cause: String, beginning fresh: Outage = Outage(), _ actions: inout Actions) {
        let previous = current.name
        // The search's own timer goes with it (away shares it), and the scan watch.
        if current.waitsForAdvertisement, !next.waitsForAdvertisement {
            cancelTimer(.searchCheck, &actions)
            cancelTimer(.scanWatch, &actions)
        }
        // A link that was up is the last time the dongle was seen.
        if previous == .online || previous == .waitingForData, next.name != previous { history.lastSeen = now }
        current = .outage(current.outage ?? fresh, next)
        actions.append(.transition(from: previous, to: next.name, cause: cause))
    }

    /// Goes online with `session`: the outage ends, and its facts with it.
    mutating func enterOnline(_ session: Session, _ cause: String, _ actions: inout Actions) {
        let previous = current.name
        if previous == .waitingForData { history.lastSeen = now }
        current = .online(session, since: now)
        actions.append(.transition(from: previous, to: .online, cause: cause))
    }

    /// The outage goes on at `recovery` (its payload changed in place): no
    /// transition. Online, there is no outage to go on.
    mutating func update(_ recovery: Recovery) {
        guard let outage = current.outage else { return }
        current = .outage(outage, recovery)
    }

    mutating func startTimer(_ timer: SupervisorTimer, after delay: Duration, _ actions: inout Actions) {
        armedTimers.insert(timer)
        actions.append(.startTimer(timer, after: delay))
    }

    mutating func cancelTimer(_ timer: SupervisorTimer, _ actions: inout Actions) {
        guard armedTimers.remove(timer) != nil else { return }
        actions.append(.cancelTimer(timer))
    }

    /// The next id for a call whose answer comes back as an event.
    mutating func nextOperation() -> Int {
        history.operations += 1
        return history.operations
    }

    /// Cancels the timers of a live link: polls, attempt deadline, silence.
    /// (Its data goes with the current the caller enters next.)
    mutating func stopLinkActivity(_ actions: inout Actions) {
        cancelTimer(.keepalive, &actions)
        cancelTimer(.pollDeadline, &actions)
        cancelTimer(.attemptDeadline, &actions)
        cancelTimer(.silence, &actions)
    }

    /// bluetoothd or the adapter went away: everything in flight is void and
    /// every session (discovery included) is gone with it. The caller enters
    /// the current that waits for them.
    mutating func linkGoneQuietly(_ actions: inout Actions) {
        if case .online = current { actions.append(.report(.disconnected(unexpected: true))) }
        stopLinkActivity(&actions)
        for timer in SupervisorTimer.allCases { cancelTimer(timer, &actions) }
    }
}
