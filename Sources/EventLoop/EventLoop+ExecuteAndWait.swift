extension EventLoop {
    /// Runs `body` on the loop's thread, after the work submitted before it,
    /// and blocks the calling thread until it has run. For a caller that is
    /// not on the loop (it would wait for itself) and a loop that has not
    /// been stopped.
    public func executeAndWait(_ body: @escaping () -> Void) {
        precondition(!inLoop, "executeAndWait on the loop \(name) itself")
        let handed = HandedClosure(body: body)
        let done = ThreadSemaphore()
        execute {
            handed.body()
            done.signal()
        }
        done.wait()
    }
}

/// A closure run on the loop while its caller blocks for it: only one
/// thread touches it at a time.
private struct HandedClosure: @unchecked Sendable {
    let body: () -> Void
}
