import DBus
import LinkSupervisor
import Logging
import Pacing
import Simulator

/// One thing that happened in a simulation, kept as data and turned into
/// text only when printed (a seed makes millions of them).
enum TraceItem {
    /// An output of the supervisor, carried out in order.
    case action(SupervisorAction)
    case faultStarts(FaultKind, String)
    case faultEnds(FaultKind)
    /// What the simulated bluetoothd or dongle recorded.
    case simulator(SimulatorEvent)
    /// A message the bus daemon routed (only in a replay's trace).
    case bus(BusTrafficRecord)
    /// A line the daemon logged.
    case log(Logger.Level, String)
    case world(String)
    case tether(String)

    /// The hot path: polls, keep-alive timers, notifications and their
    /// messages while all is well. Left out of a replay's trace unless
    /// DST_TRACE=full.
    var isRoutine: Bool {
        switch self {
        case .action(.poll), .action(.pollWithoutReply), .action(.startTimer(.keepalive, _)),
            .action(.startTimer(.pollDeadline, _)), .action(.cancelTimer(.pollDeadline)), .action(.startTimer(.silence, _)):
            true
        case .simulator(let event): event.kind == .notify || event.kind == .write
        case .bus(let message): message.member == "WriteValue" || message.member == "PropertiesChanged" || message.kind == .methodReturn
        default: false
        }
    }

    var text: String {
        switch self {
        case .action(let action): "← \(Self.describe(action))"
        case .faultStarts(let kind, let detail): "FAULT \(kind.rawValue)" + (detail.isEmpty ? "" : ": \(detail)")
        case .faultEnds(let kind): "fault cleared: \(kind.rawValue)"
        case .simulator(let event): "bluetoothd: \(event.jsonLine)"
        case .bus(let message): "bus: \(message)"
        case .log(let level, let line): "tether \(level): \(line)"
        case .world(let what): "world: \(what)"
        case .tether(let what): "tether: \(what)"
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

}

/// The last items of a run (for a violation's report) and, when replaying,
/// every item printed as it happens.
struct Trace {
    static let kept = 60

    private var ring: [(at: Duration, item: TraceItem)] = []
    private var next = 0
    /// Replaying: where each line goes, and whether routine items go too.
    var sink: ((String) -> Void)?
    var includeRoutine = false
    /// Whether routine items are wanted at all (a full replay): else they
    /// are not even made.
    var wantsRoutine: Bool { sink != nil && includeRoutine }

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
