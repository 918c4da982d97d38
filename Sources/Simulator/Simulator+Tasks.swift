import EventLoop

/// The actor's tasks, waits and sleeps: all on its loop.
///
/// Rules, which make a run on virtual loops repeat exactly:
/// - every task the simulator starts prefers the actor's loop (`spawn`),
///   never Swift's global executor: the nonisolated code it awaits (a
///   sleep's arming on the loop, `Task.value`) runs on the loop too;
/// - it sleeps on the loop's timers (`sleepUnlessCancelled`), never with
///   `Task.sleep`, and reads the time from `loop.now`, never from a
///   `Clock` or `Date`, so that virtual time is the only time it sees.
extension Simulator {
    /// Starts a task on the actor's loop that runs `body` on the actor.
    @discardableResult
    func spawn<Value: Sendable>(_ body: @escaping @Sendable (isolated Simulator) async -> Value) -> Task<Value, Never> {
        Task(executorPreference: loop) { await body(self) }
    }

    func makeWaitID() -> Int {
        nextWaitID += 1
        return nextWaitID
    }

    /// Suspends for `duration` unless `cancelWait(id)` or `stop()` ends it early.
    func pause(_ duration: Duration, id: Int? = nil) async {
        guard !stopped else { return }
        let key = id ?? makeWaitID()
        let timer = spawn { _ = await $0.sleepUnlessCancelled(duration) }
        waits[key] = timer
        await timer.value
        waits[key] = nil
    }

    func cancelWait(_ id: Int) {
        waits.removeValue(forKey: id)?.cancel()
    }

    /// Sleeps `duration` on the loop's timers; false when the task was cancelled.
    func sleepUnlessCancelled(_ duration: Duration) async -> Bool {
        (try? await loop.sleep(for: duration)) != nil
    }

    /// Sleeps until `deadline` on the loop's clock; false when the task was cancelled.
    func sleepUnlessCancelled(until deadline: MonotonicInstant) async -> Bool {
        (try? await loop.sleep(until: deadline)) != nil
    }
}
