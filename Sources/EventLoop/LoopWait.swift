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

    public let loop: EventLoop
    private let state = Mutex(State.idle)
    /// What `arm` returned, until the wait's end takes it. Touched on the
    /// loop only; a Mutex because the class is shared across threads.
    private let disarm = Mutex<Disarm?>(nil)

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
                    // A wait that ends from here on (an event while arming,
                    // cancellation on another thread) queues its teardown
                    // behind this turn, so the teardown finds the disarm.
                    let armed = arm(self)
                    disarm.withLock { $0 = armed }
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
            let armed = disarm.withLock { $0.take() }
            armed?()
        }
        continuation.resume(returning: value)
    }
}
