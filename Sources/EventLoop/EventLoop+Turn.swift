#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CEventLoop
import Synchronization

/// The steps of a turn, which a real loop's thread and a virtual loop's
/// driver (EventLoop+Virtual.swift) both take: the submitted work, the due
/// timers, the turn-end hooks, the ready descriptors' handlers. Loop thread
/// only.
extension EventLoop {
    /// Runs the submitted work, including what it submits in turn; returns
    /// whether there was any.
    @discardableResult
    func runSubmittedWork(_ executor: UnownedSerialExecutor, _ taskExecutor: UnownedTaskExecutor) -> Bool {
        var ran = false
        while true {
            let batch = inbox.withLock { inbox -> [Work] in
                defer { inbox.work.removeAll(keepingCapacity: true) }
                return inbox.work
            }
            if batch.isEmpty { return ran }
            ran = true
            for work in batch {
                switch work {
                case .job(let job): job.runSynchronously(isolatedTo: executor, taskExecutor: taskExecutor)
                case .closure(let body): body()
                }
            }
        }
    }

    func runTurnEndHooks() {
        for entry in turnEndHooks { entry.hook() }
    }

    /// Calls the handlers of the `count` first `events` (epoll_wait's).
    func handleReady(_ events: [epoll_event], count: Int) {
        for index in 0..<count {
            let event = events[index]
            let key = event.data.u64
            if key == 0 {
                var value: UInt64 = 0
                _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
                continue
            }
            let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: key - 1))
            let ready = Readiness(rawValue: event.events)
            // A handler may remove watches (its own or others'): look each up again.
            for id in watchesByFD[fd] ?? [] {
                guard let watch = watches[id], !watch.interest.isEmpty else { continue }
                let relevant = ready.intersection(watch.interest.union(.hangup))
                if !relevant.isEmpty { watch.handler(relevant) }
            }
        }
    }

    /// A plain loop: a key path here (`map(\.deadline)`) went through the
    /// runtime's generic key-path projection and metadata cache on every turn.
    func earliestTimerDeadline() -> MonotonicInstant? {
        var earliest: MonotonicInstant?
        for timer in timers.values where earliest.map({ timer.deadline < $0 }) ?? true {
            earliest = timer.deadline
        }
        return earliest
    }

    /// A handler may schedule or cancel timers: pick the earliest again each
    /// time. Ties go to the timer scheduled first (the smaller id), not to
    /// the dictionary's order, which its per-process hash seed shuffles: a
    /// virtual loop's runs must repeat.
    func runDueTimers() {
        while let (id, timer) = timers.min(by: Self.firesFirst), timer.deadline <= now {
            timers[id] = nil
            timer.handler()
        }
    }

    private static func firesFirst(_ a: (key: UInt64, value: Timer), _ b: (key: UInt64, value: Timer)) -> Bool {
        a.value.deadline < b.value.deadline || (a.value.deadline == b.value.deadline && a.key < b.key)
    }
}
