import Synchronization

/// One task parked until an event on a loop: a timer's firing (a sleep), a
/// descriptor turning readable (a signal), whatever `arm` sets up.
///
/// Invariants:
/// - the task is resumed exactly once: by `resume(_:)` (with the value) or
///   by its cancellation (with nil), whichever comes first; a cancelled task
///   that had not parked yet is resumed at once and nothing is armed;
/// - `arm` and the `Disarm` it returns run on the loop, `arm` at most once,
///   and the disarm exactly once when `arm` ran, after the wait is over
///   however it ended (so a timer or a watch never outlives the wait, and a
///   descriptor `arm` opened is closed).
public final class LoopWait<Value: Sendable>: Sendable {
    /// Removes what `arm` set up; runs on the loop.
    public typealias Disarm = @Sendable () -> Void

    private enum State {
        case idle
        case waiting(CheckedContinuation<Value?, Never>)
        case done
    }

    private struct Arming {
        var disarm: Disarm?
        /// The wait ended; a disarm handed over from now on runs at once.
        var over = false
    }

    public let loop: EventLoop
    private let state = Mutex(State.idle)
    private let arming = Mutex(Arming())

    public init(on loop: EventLoop) {
        self.loop = loop
    }

    /// Parks the calling task and runs `arm` on the loop; returns the value
    /// `resume(_:)` gave, or nil when the task was cancelled first. `arm`
    /// gets this wait (its event calls `resume`) and returns what removes
    /// the event's source.
    public func value(arm: @escaping @Sendable (LoopWait<Value>) -> Disarm) async -> Value? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                let parked = state.withLock { state -> Bool in
                    guard case .idle = state else { return false }
                    state = .waiting(continuation)
                    return true
                }
                guard parked else { return continuation.resume(returning: nil) }
                loop.execute { [self] in
                    // Ended (cancelled) between parking and this turn: nothing to arm.
                    guard isWaiting else { return }
                    hold(arm(self))
                }
            }
        } onCancel: {
            finish(nil)
        }
    }

    /// Ends the wait with `value`; nothing if it ended already. Any thread.
    public func resume(_ value: Value) {
        finish(value)
    }

    private var isWaiting: Bool {
        state.withLock { if case .waiting = $0 { true } else { false } }
    }

    private func finish(_ value: Value?) {
        let continuation = state.withLock { state -> CheckedContinuation<Value?, Never>? in
            switch state {
            case .idle:
                // Cancelled before parking: `value(arm:)` resumes at once.
                state = .done
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .done:
                return nil
            }
        }
        guard let continuation else { return }
        loop.execute { [self] in
            let disarm = arming.withLock { arming -> Disarm? in
                arming.over = true
                defer { arming.disarm = nil }
                return arming.disarm
            }
            disarm?()
        }
        continuation.resume(returning: value)
    }

    /// On the loop: keeps `disarm` for the end of the wait, or runs it now if
    /// the wait ended while `arm` ran (its event came at once).
    private func hold(_ disarm: @escaping Disarm) {
        let runNow = arming.withLock { arming -> Bool in
            if arming.over { return true }
            arming.disarm = disarm
            return false
        }
        if runNow { disarm() }
    }
}
