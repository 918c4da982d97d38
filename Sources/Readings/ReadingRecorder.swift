import Dispatch
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Thread-safe front end to a `ReadingLog`.
///
/// `record` never touches the disk: it queues the reading and, if no drain is
/// scheduled, schedules one on the recorder's own serial queue, so each reading
/// reaches write(2) within milliseconds and bursts coalesce into one write.
/// fsync follows a write by at most `flushInterval` (a one-shot timer, so an idle
/// daemon never wakes). While writes fail (disk full, EIO) readings wait in memory,
/// bounded by `maxBacklog` (the oldest are dropped and later accounted for by a gap
/// record), and a one-shot timer retries until the disk works again.
public final class ReadingRecorder: @unchecked Sendable {
    // @unchecked: `state` is a `Mutex`; `log`, the timers and
    // `lastReport` are only touched on `queue`.

    public struct Stats: Sendable, Equatable {
        /// Readings written (gap records not counted).
        public var written: UInt64
        /// The last seq written to the log.
        public var lastSeq: UInt64
        /// Readings waiting to be written (including a batch being written).
        public var pending: Int
        /// Readings dropped because the backlog overflowed.
        public var dropped: UInt64
        /// Gap records written to the log (each accounts for a run of dropped readings).
        public var gapRecords: UInt64
        /// The last write or sync error, cleared by the next successful write.
        public var lastError: String?

        public init(
            written: UInt64 = 0, lastSeq: UInt64 = 0, pending: Int = 0, dropped: UInt64 = 0, gapRecords: UInt64 = 0,
            lastError: String? = nil
        ) {
            self.written = written
            self.lastSeq = lastSeq
            self.pending = pending
            self.dropped = dropped
            self.gapRecords = gapRecords
            self.lastError = lastError
        }
    }

    private struct Gap {
        var count: Int
        var device: String
        var at: Date
    }

    private struct State {
        var backlog = ReadingBacklog()
        var inFlight = 0
        var drainScheduled = false
        var waitingForRetry = false
        /// An fsync is running on the queue.
        var syncing = false
        var closed = false
        /// Readings dropped and not yet covered by a gap record in the log.
        var gap: Gap?
        var written: UInt64 = 0
        var lastSeq: UInt64
        var dropped: UInt64 = 0
        var gapRecords: UInt64 = 0
        var lastError: String?
    }

    private let log: ReadingLog
    private let flushInterval: Duration
    private let retryInterval: Duration
    private let maxBacklog: Int
    private let onError: @Sendable (String) -> Void
    private let onRestored: (@Sendable (String) -> Void)?
    private let queue = DispatchQueue(label: "tether.readings")
    /// Marks `queue`, so `flush`/`close` called from code already running on it
    /// (e.g. an `onError` handler) do not deadlock on `queue.sync`.
    private let queueKey = DispatchSpecificKey<Bool>()
    private let state: Mutex<State>

    private var syncTimer: DispatchSourceTimer?
    private var retryTimer: DispatchSourceTimer?
    private var lastReport: ContinuousClock.Instant?
    /// `log.restoredFiles` already told through `onError`.
    private var restorationsReported = 0
    private var logClosed = false
    /// Errors are reported through `onError` at most this often.
    private let reportInterval: Duration = .seconds(60)

    /// - Parameters:
    ///   - onRestored: called (on the recorder's queue) with the path of a
    ///     file someone removed while it was appended to, once the log wrote
    ///     it back; nil: told through `onError`.
    ///   - onError: called (on the recorder's queue) with a description of a write
    ///     or sync failure, at most once a minute.
    public convenience init(
        log: ReadingLog, flushInterval: Duration, maxBacklog: Int, onRestored: (@Sendable (String) -> Void)? = nil,
        onError: @escaping @Sendable (String) -> Void
    ) {
        self.init(
            log: log, flushInterval: flushInterval, maxBacklog: maxBacklog, retryInterval: .seconds(1), onRestored: onRestored,
            onError: onError)
    }

    /// `retryInterval` is adjustable so tests need not wait a second per retry.
    init(
        log: ReadingLog, flushInterval: Duration, maxBacklog: Int, retryInterval: Duration,
        onRestored: (@Sendable (String) -> Void)? = nil, onError: @escaping @Sendable (String) -> Void
    ) {
        self.log = log
        self.flushInterval = flushInterval
        self.retryInterval = retryInterval
        self.maxBacklog = max(maxBacklog, 1)
        self.onRestored = onRestored
        self.onError = onError
        self.state = Mutex(State(lastSeq: log.lastSeq))
        queue.setSpecific(key: queueKey, value: true)
    }

    deinit {
        syncTimer?.cancel()
        retryTimer?.cancel()
    }

    public var stats: Stats {
        state.withLock { state in
            Stats(
                written: state.written,
                lastSeq: state.lastSeq,
                pending: state.backlog.count + state.inFlight,
                dropped: state.dropped,
                gapRecords: state.gapRecords,
                lastError: state.lastError
            )
        }
    }

    /// Queues `reading` for writing. Never blocks on the disk.
    public func record(_ reading: Reading) {
        if enqueue(CollectionOfOne(reading)) != .notNeeded {
            queue.async { self.drain() }
        }
    }

    /// Queues `readings` and writes them at once, on the calling thread, in
    /// one write(2) (the daemon's event loop calls this once per turn with
    /// the turn's readings: no thread hop, no wake-up of another thread).
    /// While writes fail they wait for the retry timer, as with `record`.
    ///
    /// While an fsync runs on the recorder's queue (it can take tens of
    /// milliseconds for a second's worth of readings), the readings are left
    /// to the queue instead: the caller's thread, the daemon's event loop,
    /// must not wait for the disk.
    public func write(_ readings: [Reading]) {
        switch enqueue(readings) {
        case .notNeeded: break
        case .needed: onQueue { drain() }
        case .neededWhileSyncing: queue.async { self.drain() }
        }
    }

    private enum DrainNeed { case notNeeded, needed, neededWhileSyncing }

    /// Adds `readings` to the backlog (dropping the oldest beyond
    /// `maxBacklog`) and says whether the caller must start a drain: not if
    /// one is scheduled already or the retry timer will.
    private func enqueue(_ readings: some Sequence<Reading>) -> DrainNeed {
        state.withLock { state in
            guard !state.closed else { return .notNeeded }
            for reading in readings { state.backlog.append(reading) }
            trimBacklog(&state)
            guard !state.drainScheduled, !state.waitingForRetry else { return .notNeeded }
            state.drainScheduled = true
            return state.syncing ? .neededWhileSyncing : .needed
        }
    }

    /// Writes everything pending and fsyncs, synchronously (e.g. on SIGTERM).
    /// If the disk is failing the readings stay pending and the error is reported.
    public func flush() {
        onQueue {
            drain()
            syncNow()
        }
    }

    /// Flushes, then closes the log. Later `record` calls are ignored.
    public func close() {
        onQueue {
            guard !logClosed else { return }
            state.withLock { state in state.closed = true }
            drain()
            syncNow()
            retryTimer?.cancel()
            retryTimer = nil
            let unwritten = state.withLock { state in state.backlog.count }
            if unwritten > 0 {
                onError("closing the readings log with \(unwritten) readings that could not be written")
            }
            log.close()
            logClosed = true
        }
    }

    // MARK: - On the queue

    private func onQueue(_ body: () -> Void) {
        if DispatchQueue.getSpecific(key: queueKey) == true {
            body()
        } else {
            queue.sync(execute: body)
        }
    }

    /// Readings per write(2): a backlog of 100,000 readings after a disk
    /// failure goes out in ~1 MB pieces, so a disk with a little room left
    /// takes some of it instead of refusing one huge all-or-nothing write.
    static let chunkSize = 4096

    /// Writes all pending readings, oldest first, in chunks (a gap record, if
    /// readings were dropped, goes in front of the first).
    private func drain() {
        while drainChunk() {}
    }

    /// Writes one chunk; returns whether more is waiting and writing works.
    private func drainChunk() -> Bool {
        guard !logClosed else { return false }
        let (batch, gap) = state.withLock { (state: inout State) -> ([Reading], Gap?) in
            state.drainScheduled = false
            let batch = state.backlog.removeOldest(upTo: Self.chunkSize)
            state.inFlight = batch.count
            return (batch, state.gap)
        }
        guard !batch.isEmpty || gap != nil else { return false }

        var entries: [ReadingLog.Entry] = []
        entries.reserveCapacity(batch.count + 1)
        if let gap { entries.append(.gap(count: gap.count, device: gap.device, at: gap.at)) }
        for reading in batch { entries.append(.reading(reading)) }

        do {
            try log.write(entries)
            let lastSeq = log.lastSeq
            let more = state.withLock { (state: inout State) -> Bool in
                state.inFlight = 0
                state.written += UInt64(batch.count)
                if gap != nil { state.gapRecords += 1 }
                state.lastSeq = lastSeq
                state.lastError = nil
                // Drops that happened while we were writing stay for the next gap record.
                if let gap, let now = state.gap {
                    state.gap = now.count > gap.count ? Gap(count: now.count - gap.count, device: now.device, at: now.at) : nil
                }
                // Writing works (again): readings that arrived while we were
                // waiting for a retry were not scheduled; the loop takes them.
                state.waitingForRetry = false
                return !state.backlog.isEmpty || state.gap != nil
            }
            retryTimer?.cancel()
            retryTimer = nil
            reportRestorations()
            armSyncTimer()
            return more
        } catch {
            let message = "cannot write readings to \(log.directory): \(error)"
            let pending = state.withLock { (state: inout State) -> Int in
                state.inFlight = 0
                state.backlog.prepend(batch)
                trimBacklog(&state)
                state.lastError = message
                state.waitingForRetry = true
                return state.backlog.count
            }
            report("\(message); keeping \(pending) readings in memory (at most \(maxBacklog)) and retrying every \(retryIntervalText)")
            armRetryTimer()
            return false
        }
    }

    /// The retry interval as the config spells durations ("1s", "250ms"), to
    /// whole milliseconds (the config's `DurationText` is in another module,
    /// which the readings log does not depend on).
    private var retryIntervalText: String {
        let (seconds, attoseconds) = retryInterval.components
        let milliseconds = attoseconds / 1_000_000_000_000_000
        return milliseconds == 0 ? "\(seconds)s" : "\(seconds * 1000 + milliseconds)ms"
    }

    /// Drops the oldest readings beyond `maxBacklog`, remembering them for the gap record. Called inside `state.withLock`.
    private func trimBacklog(_ state: inout State) {
        while state.backlog.count > maxBacklog, let dropped = state.backlog.removeOldest() {
            state.dropped += 1
            // The gap record sits where the dropped readings would have been, so it
            // carries the newest dropped reading's arrival time. A failed batch
            // put back in front can drop readings older than earlier drops.
            let newest = max(state.gap?.at ?? dropped.receivedAt, dropped.receivedAt)
            state.gap = Gap(count: (state.gap?.count ?? 0) + 1, device: dropped.device, at: newest)
        }
    }

    private func syncNow() {
        syncTimer?.cancel()
        syncTimer = nil
        guard !logClosed else { return }
        state.withLock { state in state.syncing = true }
        defer { state.withLock { state in state.syncing = false } }
        do {
            try log.sync()
        } catch {
            let message = "cannot sync readings in \(log.directory): \(error)"
            state.withLock { state in state.lastError = message }
            report(message)
        }
        reportRestorations()
    }

    /// Each file the log wrote back after someone removed it, told once and
    /// at once (not held back by `reportInterval`: it is not a repeating failure).
    private func reportRestorations() {
        for path in log.restoredFiles.dropFirst(restorationsReported) {
            if let onRestored {
                onRestored(path)
            } else {
                onError("\(path) was removed while Tether appended to it: its readings were written back to a new file of that name")
            }
        }
        restorationsReported = log.restoredFiles.count
    }

    private func armSyncTimer() {
        guard syncTimer == nil else { return }
        syncTimer = oneShotTimer(after: flushInterval) { recorder in
            recorder.syncTimer = nil
            recorder.syncNow()
        }
    }

    private func armRetryTimer() {
        guard retryTimer == nil else { return }
        retryTimer = oneShotTimer(after: retryInterval) { recorder in
            recorder.retryTimer = nil
            recorder.state.withLock { $0.waitingForRetry = false }
            recorder.drain()
        }
    }

    private func oneShotTimer(after delay: Duration, _ handler: @escaping @Sendable (ReadingRecorder) -> Void) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.dispatchInterval(delay))
        timer.setEventHandler { [weak self] in
            if let self { handler(self) }
        }
        timer.resume()
        return timer
    }

    /// Reports through `onError`, at most once per `reportInterval` (monotonic clock,
    /// so wall-clock jumps cannot cause a flood or a long silence).
    private func report(_ message: String) {
        let now = ContinuousClock.now
        if let lastReport, now - lastReport < reportInterval { return }
        lastReport = now
        onError(message)
    }

    private static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return .nanoseconds(0) }
        guard seconds < Int64(Int32.max) else { return .seconds(Int(Int32.max)) }
        return .nanoseconds(Int(seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
    }
}
