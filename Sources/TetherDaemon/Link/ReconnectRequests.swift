import EventLoop

/// Callers of `tether reconnect` waiting to hear that their attempt started.
///
/// The decision whether a request can be taken at all is the supervisor's
/// (`Supervisor.handle(.reconnectRequested)` answers `.reconnectRefused`);
/// this type only parks the callers and answers them when the supervisor's
/// actions say an attempt started, or when their wait runs out.
///
/// Threading: confined to the loop; `@unchecked Sendable` only so that bus
/// replies, which run on that loop, may capture it.
final class ReconnectRequests: @unchecked Sendable {
    private let loop: EventLoop
    private var waiting: [Int: (continuation: CheckedContinuation<ReconnectOutcome, Never>, deadline: EventLoop.TimerID)] = [:]
    private var nextID = 0

    init(loop: EventLoop) {
        self.loop = loop
    }

    var isEmpty: Bool { waiting.isEmpty }

    /// Parks a caller until `answerAll` or `limit`; then `onTimeout` gives its answer.
    func park(
        _ continuation: CheckedContinuation<ReconnectOutcome, Never>, limit: Duration,
        onTimeout: @escaping () -> ReconnectOutcome
    ) {
        nextID += 1
        let id = nextID
        let deadline = loop.schedule(after: limit) { [self] in
            waiting.removeValue(forKey: id)?.continuation.resume(returning: onTimeout())
        }
        waiting[id] = (continuation, deadline)
    }

    func answerAll(_ outcome: ReconnectOutcome) {
        let all = waiting
        waiting = [:]
        for (_, entry) in all {
            loop.cancelTimer(entry.deadline)
            entry.continuation.resume(returning: outcome)
        }
    }
}
