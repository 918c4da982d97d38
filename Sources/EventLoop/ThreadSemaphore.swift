#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A POSIX semaphore, for a thread that must block until another thread
/// (a loop) has done something: `EventLoop.executeAndWait`, the root task.
final class ThreadSemaphore: @unchecked Sendable {
    // @unchecked: sem_post and sem_wait are thread-safe; the semaphore is
    // allocated once and never moved.
    private let semaphore: UnsafeMutablePointer<sem_t>

    init() {
        semaphore = .allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    func signal() {
        sem_post(semaphore)
    }

    /// Blocks until signalled (a signal handler's EINTR is waited out).
    func wait() {
        while sem_wait(semaphore) != 0 {}
    }
}
