import EventLoop
import Synchronization

/// Log output handed to a writer thread, in order, with a bound.
///
/// The thread that logs (the daemon's event loop among them) only appends
/// to a buffer under a lock and never waits for the reader: journald can
/// stall (busy, being restarted, its socket's queue full), and a blocked
/// loop would stop the keep-alive. The buffer holds at most `limit` bytes;
/// what does not fit while the writer is stuck is dropped and counted, and
/// once the writer has delivered what was queued before the drops, one
/// notice says how many entries were lost. So a stall costs bounded memory
/// and a known number of lines, never the daemon's loop.
///
/// Threading: `submit` from any thread; `deliver` and the notice run on the
/// queue's own thread (an event loop, not a dispatch queue, whose worker
/// thread would bring libdispatch's once-a-second pool monitor with it),
/// one entry at a time, in submission order.
/// Invariants: queued bytes ≤ `limit` (plus the batch being written: memory
/// stays under twice the limit), except one entry larger than the limit
/// into an empty queue; at most one drain runs; every entry submitted is
/// either delivered or counted in exactly one notice.
public final class BoundedLogQueue<Entry: Sendable>: Sendable {
    private struct Pending {
        var entries: [(entry: Entry, size: Int)] = []
        var bytes = 0
        var dropped = 0
        var draining = false
    }

    public let limit: Int
    private let pending = Mutex(Pending())
    private let queue: EventLoop
    private let deliver: @Sendable (Entry) -> Void
    private let notice: @Sendable (_ dropped: Int, _ before: Entry) -> Entry
    private let droppedTotal = Atomic<Int>(0)

    /// - Parameters:
    ///   - limit: bytes queued at most (entries' `size`s).
    ///   - deliver: writes one entry; may block.
    ///   - notice: the entry that reports `dropped` lost entries, made from
    ///     the entry delivered just before them (its destination, say).
    public init(
        label: String, limit: Int, deliver: @escaping @Sendable (Entry) -> Void,
        notice: @escaping @Sendable (_ dropped: Int, _ before: Entry) -> Entry
    ) {
        self.limit = limit
        queue = EventLoop(name: label)
        self.deliver = deliver
        self.notice = notice
    }

    /// Entries dropped since start.
    public var dropped: Int { droppedTotal.load(ordering: .relaxed) }

    /// Bytes waiting for the writer.
    public var queuedBytes: Int { pending.withLock { $0.bytes } }

    /// Queues `entry` (`size` bytes of it count against the limit), or drops
    /// it when the queue is full. Never blocks on the writer.
    public func submit(_ entry: Entry, size: Int) {
        let startDrain = pending.withLock { pending -> Bool in
            guard pending.bytes + size <= limit || pending.entries.isEmpty else {
                pending.dropped += 1
                return false
            }
            pending.entries.append((entry, size))
            pending.bytes += size
            if pending.draining { return false }
            pending.draining = true
            return true
        }
        if startDrain { queue.execute { self.drain() } }
    }

    private func drain() {
        while true {
            let (batch, dropped) = pending.withLock { pending -> ([(entry: Entry, size: Int)], Int) in
                let taken = (pending.entries, pending.dropped)
                pending.entries.removeAll(keepingCapacity: false)
                pending.bytes = 0
                pending.dropped = 0
                if taken.0.isEmpty && taken.1 == 0 { pending.draining = false }
                return taken
            }
            if batch.isEmpty && dropped == 0 { return }
            for item in batch { deliver(item.entry) }
            // Drops happen only while entries are queued, so a batch with
            // drops is never empty. The notice follows the entries queued
            // before the drops: it sits where the lost entries were.
            if dropped > 0, let before = batch.last?.entry {
                droppedTotal.add(dropped, ordering: .relaxed)
                deliver(notice(dropped, before))
            }
        }
    }

    /// Waits until everything submitted so far is delivered (before exiting).
    public func flush() {
        if !queue.inLoop { queue.executeAndWait {} }
    }

    deinit {
        queue.stop()
    }
}
