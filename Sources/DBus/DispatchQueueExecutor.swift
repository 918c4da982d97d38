import Dispatch

/// A serial executor that runs jobs on one `DispatchQueue`.
///
/// A `Bus` uses it as its actor executor and also runs libdbus's watch and
/// timeout callbacks (DispatchSources) on the same queue, so every libdbus
/// call for a connection happens on one serial queue. libdbus is then never
/// called from two threads at once and never needs its own locking to be
/// right.
public final class DispatchQueueExecutor: SerialExecutor, @unchecked Sendable {
    public let queue: DispatchQueue

    public init(label: String) {
        queue = DispatchQueue(label: label)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unownedJob = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async {
            unownedJob.runSynchronously(on: executor)
        }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Lets `assumeIsolated` succeed in DispatchSource handlers on the queue.
    public func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
