import Synchronization

/// Virtual monotonic time, shared by the virtual loops that run on it.
///
/// Invariant: it only moves forward. Written by the thread that drives its
/// loops; read from any thread.
public final class VirtualClock: Sendable {
    private let nanoseconds: Atomic<UInt64>

    public init(start: MonotonicInstant = MonotonicInstant(nanoseconds: 0)) {
        nanoseconds = Atomic(start.nanoseconds)
    }

    public var now: MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds.load(ordering: .acquiring)) }

    /// Moves the clock to `instant`, unless that is in its past.
    func move(to instant: MonotonicInstant) {
        if instant.nanoseconds > nanoseconds.load(ordering: .acquiring) {
            nanoseconds.store(instant.nanoseconds, ordering: .releasing)
        }
    }
}
