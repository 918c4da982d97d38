import LinkSupervisor
import Pacing

/// One thing that happened in a simulation, kept as data and turned into
/// text only when printed (a seed makes millions of them).
enum TraceItem {
    /// An input handed to the supervisor.
    case event(SupervisorEvent)
    /// An output of the supervisor, carried out in order.
    case action(SupervisorAction)
    case faultStarts(FaultKind, String)
    case faultEnds(FaultKind)
    /// The model (bluetoothd, the adapter, the dongle) changed.
    case world(String)
    /// Readings bluetoothd handed to Tether: ids first…first+count−1.
    case readings(first: UInt64, count: Int)
    case disk(String)
    case tether(String)

    /// The hot path: polls, keep-alive timers and readings while all is well.
    /// Left out of a replay's trace unless DST_TRACE=full.
    var isRoutine: Bool {
        switch self {
        case .event(.timerFired(.keepalive)), .event(.timerFired(.silence)), .event(.dataReceived),
            .event(.pollFinished(_, .success)), .action(.startTimer(.silence, _)):
            true
        case .action(.poll), .action(.startTimer(.keepalive, _)), .action(.startTimer(.pollDeadline, _)),
            .action(.cancelTimer(.pollDeadline)):
            true
        case .readings, .disk("sync"):
            true
        default:
            false
        }
    }

    var text: String {
        switch self {
        case .event(let event): "→ \(Self.describe(event))"
        case .action(let action): "← \(Self.describe(action))"
        case .faultStarts(let kind, let detail): "FAULT \(kind.rawValue)" + (detail.isEmpty ? "" : ": \(detail)")
        case .faultEnds(let kind): "fault cleared: \(kind.rawValue)"
        case .world(let what): "world: \(what)"
        case .readings(let first, let count): "readings \(first)…\(first + UInt64(count) - 1) delivered"
        case .disk(let what): "disk: \(what)"
        case .tether(let what): "tether: \(what)"
        }
    }

    private static func describe(_ event: SupervisorEvent) -> String {
        switch event {
        case .observed(let o):
            "observed bluez=\(bit(o.bluezPresent)) adapter=\(bit(o.adapterPresent))/\(bit(o.adapterPowered)) "
                + "device=\(bit(o.devicePresent)) connected=\(bit(o.connected)) resolved=\(bit(o.servicesResolved)) "
                + "gatt=\(bit(o.characteristicsReady))"
        case .advertising: "advertising"
        case .othersAdvertising: "othersAdvertising"
        case .connectFinished(let id, let result): "connectFinished #\(id) \(describe(result))"
        case .subscribeFinished(let id, let result): "subscribeFinished #\(id) \(describe(result))"
        case .pairFinished(let id, let result): "pairFinished #\(id) \(describe(result))"
        case .bondRejected(let detail): "bondRejected \(detail)"
        case .pollFinished(let id, let result): "pollFinished #\(id) \(describe(result))"
        case .escalationFinished(let step, let run, let result): "escalationFinished \(step.rawValue) #\(run) \(describe(result))"
        case .discoveryFailed(let id, let failure): "discoveryFailed #\(id) \(failure.description)"
        case .timerFired(let timer): "timerFired \(timer.rawValue)"
        case .notificationsEnded(let why): "notificationsEnded \(why)"
        case .reconnectRequested: "reconnectRequested"
        case .dataReceived: "dataReceived"
        case .characteristicsChanged: "characteristicsChanged"
        case .removeDeviceFinished(let id, let result): "removeDeviceFinished #\(id) \(describe(result))"
        case .controllerChecked(let id, let check): "controllerChecked #\(id) \(check)"
        }
    }

    private static func describe(_ result: Result<Void, LinkFailure>) -> String {
        switch result {
        case .success: "ok"
        case .failure(let failure): "failed(\(failure.kind.rawValue)\(failure.staleDevice ? ",stale" : "")): \(failure.description)"
        }
    }

    private static func describe(_ action: SupervisorAction) -> String {
        switch action {
        case .connect(let id, let timeout): "connect #\(id) timeout \(timeout.roundedText)"
        case .disconnect: "disconnect"
        case .subscribe(let id): "subscribe #\(id)"
        case .pair(let id, let timeout): "pair #\(id) timeout \(timeout.roundedText)"
        case .poll(let id, let timeout): "poll #\(id) timeout \(timeout.roundedText)"
        case .pollWithoutReply: "poll without reply"
        case .startDiscovery(let id): "startDiscovery #\(id)"
        case .stopDiscovery: "stopDiscovery"
        case .escalate(let step, let run): "escalate \(step.rawValue) #\(run)"
        case .powerOn: "powerOn"
        case .removeDevice(let id): "removeDevice #\(id)"
        case .checkController(let id): "checkController #\(id)"
        case .startTimer(let timer, let delay): "startTimer \(timer.rawValue) \(delay.roundedText)"
        case .cancelTimer(let timer): "cancelTimer \(timer.rawValue)"
        case .transition(let from, let to, let cause): "\(from.rawValue) → \(to.rawValue): \(cause)"
        case .report(let report): "report \(report.eventName) \(report)"
        case .answerReconnect(let answer): "answerReconnect \(answer)"
        }
    }

    private static func bit(_ value: Bool) -> String { value ? "1" : "0" }
}

/// The last items of a run (for a violation's report) and, when replaying,
/// every item printed as it happens.
struct Trace {
    static let kept = 40

    private var ring: [(at: Duration, item: TraceItem)] = []
    private var next = 0
    /// Replaying: where each line goes, and whether routine items go too.
    var sink: ((String) -> Void)?
    var includeRoutine = false

    mutating func record(_ item: TraceItem, at time: Duration) {
        if let sink, includeRoutine || !item.isRoutine { sink(Self.line(at: time, item)) }
        if ring.count < Self.kept {
            ring.append((time, item))
        } else {
            ring[next] = (time, item)
            next = (next + 1) % Self.kept
        }
    }

    /// The kept items, oldest first, as lines.
    var lastLines: [String] {
        (ring[next...] + ring[..<next]).map { Self.line(at: $0.at, $0.item) }
    }

    static func line(at time: Duration, _ item: TraceItem) -> String {
        "\(time.simulationStamp) \(item.text)"
    }
}
