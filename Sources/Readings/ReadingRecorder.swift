import DurationUnits
import EventLoop
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Thread-safe front end to a `ReadingLog`.
///
/// Invariants:
/// - `record` and `write` never touch the disk and never wait for it: they
///   queue the readings and, if no drain is scheduled, schedule one on the
///   recorder's own serial queue, so readings reach write(2) within
///   microseconds and bursts coalesce into one write. The caller is the
///   daemon's event loop, which polls the dongle: a disk that hangs (a
///   frozen file system, an SD card stalled in its own garbage collection,
///   writeback throttling) must not stop the keep-alive, or the dongle falls
///   asleep for good;
/// - fsync follows a write by at most `flushInterval` (a one-shot timer, so an
///   idle daemon never wakes);
/// - while writes fail (disk full, EIO) or hang, readings wait in memory,
///   bounded by `maxBacklog` (the oldest are dropped and later accounted for
///   by a gap record); after a failure a one-shot timer retries until the
///   disk works again;
/// - a write or fsync that has not returned after `stallLimit` is reported
///   once (`onStall`, by the thread that hands in the next readings) and
///   shown by `stats.lastError` while it lasts;
/// - every time it reads (the flush and retry timers, stalls, the report
///   interval) is its loop's clock (`EventLoop.now`), so that on a virtual
///   loop the fsync comes at the virtual flush deadline.
public final class ReadingRecorder: @unchecked Sendable {
    /// A write or fsync that does not return, and its end.
    public enum DiskStall: Sendable, Equatable {
        /// One has not returned for `stallLimit`.
        case stalled(String)
        /// The one reported as stalled returned.
        case answered(String)

        public var message: String {
            switch self {
            case .stalled(let message), .answered(let message): message
            }
        }
    }

    // @unchecked: `state` is a `Mutex`; `log`, the timers and
    // `lastReport` are only touched on `queue`'s thread.

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
        /// The last write or sync error, cleared by the next successful write;
        /// while a write or fsync has not returned for `stallLimit`, that.
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
        /// A write or fsync is running on the queue, since then.
        var diskBusySince: MonotonicInstant?
        /// The running write or fsync was reported as stalled.
        var stallReported = false
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
    private let stallLimit: Duration
    private let onError: @Sendable (String) -> Void
    private let onRestored: (@Sendable (String) -> Void)?
    private let onStall: (@Sendable (DiskStall) -> Void)?
    /// Where every write and fsync runs, and its timers: the recorder's own
    /// thread, unless the caller gave it a loop (the deterministic
    /// simulation: its virtual loop). An event loop rather than a dispatch
    /// queue: a dispatch worker thread, once started, brings libdispatch's
    /// once-a-second pool monitor with it for the life of the process.
    private let queue: EventLoop
    /// `queue` is the recorder's own (stopped with it), not the caller's.
    private let ownsQueue: Bool
    private let state: Mutex<State>

    private var syncTimer: EventLoop.TimerID?
    private var retryTimer: EventLoop.TimerID?
    /// The last write failed: the next is a probe of `probeSize` readings.
    private var lastWriteFailed = false
    private var lastReport: MonotonicInstant?
    /// `log.restoredFiles` already told through `onError`.
    private var restorationsReported = 0
    private var logClosed = false
    /// Errors are reported through `onError` at most this often.
    private let reportInterval: Duration = .seconds(60)

    /// A write or fsync taking this long means the disk does not answer: a
    /// healthy one, even an SD card, answers within a second.
    public static let defaultStallLimit: Duration = .seconds(5)

    /// - Parameters:
    ///   - onRestored: called (on the recorder's queue) with the path of a
    ///     file someone removed while it was appended to, once the log wrote
    ///     it back; nil: told through `onError`.
    ///   - onStall: called once when a write or fsync has not returned for
    ///     `defaultStallLimit` (on the thread that handed in readings and
    ///     noticed it), and once when it returns (on the recorder's queue);
    ///     nil: told through `onError`.
    ///   - onError: called (on the recorder's queue) with a description of a write
    ///     or sync failure, at most once a minute.
    ///   - loop: where the writes, the fsyncs and their timers run, and whose
    ///     clock the recorder reads; nil: a thread of its own
    ///     (`tether-disk`), which the daemon needs so that a hung disk never
    ///     holds up its link. A given loop (a virtual one, in the
    ///     simulation) is not stopped by the recorder.
    public convenience init(
        log: ReadingLog, flushInterval: Duration, maxBacklog: Int, onRestored: (@Sendable (String) -> Void)? = nil,
        onStall: (@Sendable (DiskStall) -> Void)? = nil, loop: EventLoop? = nil, onError: @escaping @Sendable (String) -> Void
    ) {
        self.init(
            log: log, flushInterval: flushInterval, maxBacklog: maxBacklog, retryInterval: .seconds(1),
            stallLimit: Self.defaultStallLimit, onRestored: onRestored, onStall: onStall, loop: loop, onError: onError)
    }

    /// `retryInterval` and `stallLimit` are adjustable so tests need not wait seconds.
    init(
        log: ReadingLog, flushInterval: Duration, maxBacklog: Int, retryInterval: Duration,
        stallLimit: Duration = ReadingRecorder.defaultStallLimit, onRestored: (@Sendable (String) -> Void)? = nil,
        onStall: (@Sendable (DiskStall) -> Void)? = nil, loop: EventLoop? = nil, onError: @escaping @Sendable (String) -> Void
    ) {
        queue = loop ?? EventLoop(name: "tether-disk")
        ownsQueue = loop == nil
        self.log = log
        self.flushInterval = flushInterval
        self.retryInterval = retryInterval
        self.maxBacklog = max(maxBacklog, 1)
        self.stallLimit = stallLimit
        self.onRestored = onRestored
        self.onStall = onStall
        self.onError = onError
        self.state = Mutex(State(lastSeq: log.lastSeq))
    }

    deinit {
        // Its timers go with it (they hold the recorder weakly).
        if ownsQueue { queue.stop() }
    }

    public var stats: Stats {
        state.withLock { state in
            Stats(
                written: state.written,
                lastSeq: state.lastSeq,
                pending: state.backlog.count + state.inFlight,
                dropped: state.dropped,
                gapRecords: state.gapRecords,
                lastError: stalled(state).map(stallText) ?? state.lastError
            )
        }
    }

    /// How long the running write or fsync has taken, once past `stallLimit`
    /// (the clock is read only while one runs: not on every hand-in).
    private func stalled(_ state: State) -> Duration? {
        guard let since = state.diskBusySince else { return nil }
        let duration = since.duration(to: queue.now)
        return duration >= stallLimit ? duration : nil
    }

    private func stallText(_ duration: Duration) -> String {
        "the disk has not answered a write in \(log.directory) for \(duration.components.seconds)s"
    }

    /// Queues `reading` for writing. Never blocks on the disk.
    public func record(_ reading: Reading) {
        hand(CollectionOfOne(reading))
    }

    /// Queues `readings` (the daemon's event loop calls this at a turn's end
    /// with the readings taken since it last did) for one write(2) on the
    /// recorder's queue.
    /// Never blocks on the disk: the readings wait in memory while it fails or
    /// hangs, as with `record`.
    public func write(_ readings: [Reading]) {
        hand(readings)
    }

    private func hand(_ readings: some Sequence<Reading>) {
        let (drainNeeded, stall) = state.withLock { (state: inout State) -> (Bool, Duration?) in
            guard !state.closed else { return (false, nil) }
            for reading in readings { state.backlog.append(reading) }
            trimBacklog(&state)
            var stall: Duration?
            if !state.stallReported, let duration = stalled(state) {
                state.stallReported = true
                stall = duration
            }
            // Not if a drain is scheduled already or the retry timer will start one.
            guard !state.drainScheduled, !state.waitingForRetry else { return (false, stall) }
            state.drainScheduled = true
            return (true, stall)
        }
        if drainNeeded { queue.execute { self.drain() } }
        if let stall {
            tellStall(.stalled(
                "\(stallText(stall)); readings wait in memory (at most \(maxBacklog), the oldest dropped beyond) until it does"))
        }
    }

    private func tellStall(_ report: DiskStall) {
        if let onStall { onStall(report) } else { onError(report.message) }
    }

    /// Writes everything pending and fsyncs, synchronously (e.g. on SIGTERM).
    /// If the disk is failing the readings stay pending and the error is reported.
    public func flush() {
        onQueue { [self] in
            drain()
            syncNow()
        }
    }

    /// Flushes, then closes the log. Later `record` calls are ignored.
    public func close() {
        onQueue { [self] in
            guard !logClosed else { return }
            state.withLock { state in state.closed = true }
            drain()
            syncNow()
            cancel(&retryTimer)
            let unwritten = state.withLock { state in state.backlog.count }
            if unwritten > 0 {
                onError("closing the readings log with \(unwritten) readings that could not be written")
            }
            log.close()
            logClosed = true
        }
    }

    // MARK: - On the queue

    /// Runs `body` on the queue and waits for it; at once when called from
    /// the queue's thread (an `onError` handler calling `flush`, which must not
    /// wait for itself; a virtual loop's driver, which runs it synchronously).
    private func onQueue(_ body: @escaping () -> Void) {
        if queue.inLoop {
            body()
        } else {
            queue.executeAndWait(body)
        }
    }

    /// Readings per write(2): a backlog of 100,000 readings after a disk
    /// failure goes out in ~1 MB pieces, so a disk with a little room left
    /// takes some of it instead of refusing one huge all-or-nothing write.
    static let chunkSize = 4096

    /// Readings in the first write after a failed one: while the disk stays
    /// full, each retry (one a second) formats this many rather than a whole
    /// chunk; once it is taken, full chunks follow in the same turn.
    static let probeSize = 16

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
            let batch = state.backlog.removeOldest(upTo: lastWriteFailed ? Self.probeSize : Self.chunkSize)
            state.inFlight = batch.count
            return (batch, state.gap)
        }
        guard !batch.isEmpty || gap != nil else { return false }

        var entries: [ReadingLog.Entry] = []
        entries.reserveCapacity(batch.count + 1)
        if let gap { entries.append(.gap(count: gap.count, device: gap.device, at: gap.at)) }
        for reading in batch { entries.append(.reading(reading)) }

        do {
            try onDisk { try log.write(entries) }
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
            lastWriteFailed = false
            cancel(&retryTimer)
            reportRestorations()
            armSyncTimer()
            return more
        } catch {
            lastWriteFailed = true
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
        let milliseconds = retryInterval.wholeMilliseconds
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000)s" : "\(milliseconds)ms"
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
        cancel(&syncTimer)
        guard !logClosed else { return }
        do {
            try onDisk { try log.sync() }
        } catch {
            let message = "cannot sync readings in \(log.directory): \(error)"
            state.withLock { state in state.lastError = message }
            report(message)
        }
        reportRestorations()
    }

    /// Runs one write or fsync, marked as running for `stalled`; tells when
    /// one reported as stalled returns.
    @discardableResult
    private func onDisk<T>(_ body: () throws -> T) rethrows -> T {
        let started = queue.now
        state.withLock { state in state.diskBusySince = started }
        defer {
            let (wasReported, pending) = state.withLock { (state: inout State) -> (Bool, Int) in
                let wasReported = state.stallReported
                state.diskBusySince = nil
                state.stallReported = false
                return (wasReported, state.backlog.count)
            }
            if wasReported {
                let seconds = started.duration(to: queue.now).components.seconds
                tellStall(.answered("the disk answered again after \(seconds)s; \(pending) readings waiting are written next"))
            }
        }
        return try body()
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

    private func oneShotTimer(after delay: Duration, _ handler: @escaping (ReadingRecorder) -> Void) -> EventLoop.TimerID {
        queue.schedule(after: delay) { [weak self] in
            if let self { handler(self) }
        }
    }

    private func cancel(_ timer: inout EventLoop.TimerID?) {
        if let timer { queue.cancelTimer(timer) }
        timer = nil
    }

    /// Reports through `onError`, at most once per `reportInterval` (monotonic clock,
    /// so wall-clock jumps cannot cause a flood or a long silence).
    private func report(_ message: String) {
        let now = queue.now
        if let lastReport, lastReport.duration(to: now) < reportInterval { return }
        lastReport = now
        onError(message)
    }
}
