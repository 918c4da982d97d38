import Synchronization

extension EventLoop {
    /// Runs `body` as the process's root task and blocks the calling thread
    /// (the main thread) until it returns. The task prefers `executor`, or,
    /// when that is nil, a new loop named `name` that stops afterwards.
    ///
    /// This stands in for an `async` `main`, which on Linux starts on the
    /// main dispatch queue: `dispatch_main` hands that queue to a libdispatch
    /// worker thread, and once any worker has run, libdispatch's pool monitor
    /// wakes the process every second for as long as it lives. Started on a
    /// loop, the root task and every child that inherits its executor
    /// preference run on Tether's own threads, so an idle daemon wakes only
    /// for its own timers. The main thread keeps its signal mask while it
    /// waits (`dispatch_main` unblocks every signal in it), so signals a
    /// process blocked at start reach a signalfd.
    ///
    /// The task is not fire-and-forget: the caller waits for it, as the
    /// runtime waits for an async `main`.
    public static func runRootTask<Result: Sendable>(
        name: String, preferring executor: (any TaskExecutor)? = nil, _ body: @escaping @Sendable () async -> Result
    ) -> Result {
        let loop = executor == nil ? EventLoop(name: name) : nil
        let completion = RootTaskCompletion<Result>()
        Task(executorPreference: executor ?? loop) {
            completion.finish(await body())
        }
        let result = completion.wait()
        loop?.stop()
        return result
    }
}

/// The root task's result, handed to the thread that blocks for it.
private final class RootTaskCompletion<Result: Sendable>: Sendable {
    private let done = ThreadSemaphore()
    private let result = Mutex<Result?>(nil)

    /// Called once, by the root task.
    func finish(_ value: Result) {
        result.withLock { $0 = value }
        done.signal()
    }

    /// Blocks until `finish`. The semaphore is posted only after the result
    /// is stored, so the first turn finds it; the loop stands in for a
    /// force-unwrap, not for a retry.
    func wait() -> Result {
        while true {
            done.wait()
            if let value = result.withLock({ $0 }) { return value }
        }
    }
}
