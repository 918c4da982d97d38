import Readings

/// What `ReadingRecorder` keeps: the readings not yet written, oldest first.
struct RecorderState {
    struct Pending {
        var reading: Reading
        var id: UInt64
        var deliveredAt: Duration
    }

    var backlog: [Pending] = []
    /// Readings dropped from a full backlog and not yet covered by a gap record.
    var pendingGap = 0
    var waitingForRetry = false
    var syncArmed = false
    var syncGeneration: UInt64 = 0
    var retryGeneration: UInt64 = 0

    mutating func append(_ reading: Reading, id: UInt64, at time: Duration) {
        backlog.append(Pending(reading: reading, id: id, deliveredAt: time))
    }

    /// The process ends with readings unwritten: they are lost. The
    /// invariant excuses them if they are young (within flush_interval) or
    /// the disk refused them; anything else is a violation.
    mutating func loseBacklog(_ simulation: Simulation, reason: String) {
        guard !backlog.isEmpty || pendingGap > 0 else { return }
        let refused = waitingForRetry || simulation.disk.full || simulation.disk.failing
        for pending in backlog {
            let young = simulation.now - pending.deliveredAt <= simulation.settings.flushInterval
            if !young && !refused {
                simulation.violated(
                    .readingsExactlyOnce,
                    "reading \(pending.id), delivered \((simulation.now - pending.deliveredAt).simulationStamp) before the process ended (\(reason)), was never written, and the disk did not refuse it"
                )
            }
            simulation.audit.excuse(pending.id)
        }
        // A write that died may still be in the log: a torn record that lost
        // only its newline is whole, and recovery keeps it (LogTailRecovery).
        if simulation.disk.diedInWrite { simulation.audit.gapUncertain += pendingGap }
        simulation.record(.disk("\(backlog.count) readings lost (\(reason))"))
        backlog.removeAll()
        pendingGap = 0
    }
}

/// The recorder's policy on the virtual clock, restated from
/// `ReadingRecorder` (whose thread is its own event loop, `tether-disk`, on real time):
/// the turn's readings go to the real `ReadingLog` at once (the daemon hands
/// them to the recorder's queue at the turn's end, in a dense stream at most
/// every `LinkService.handOffSpacing`, and the queue writes them microseconds
/// later: well inside the flush_interval that excuses young readings lost at
/// a kill, and the disk model never hangs a write); fsync at most
/// flush_interval after a write; while writes fail the readings wait in a
/// backlog bounded by max_backlog (the oldest dropped, then a gap record),
/// retried every second. One difference: the gap record is its own append
/// here (the recorder writes it in the same write(2) as the readings after it).
extension Simulation {
    static let chunkSize = 4096

    /// The turn's end: its readings are written (`LinkService.writeTurnReadings`).
    func takeTurnReadings() {
        while recorder.backlog.count > settings.maxBacklog {
            let dropped = recorder.backlog.removeFirst()
            recorder.pendingGap += 1
            audit.excuse(dropped.id)
            audit.dropped += 1
        }
        guard !recorder.waitingForRetry else { return }
        drainBacklog()
    }

    func drainBacklog() {
        guard tetherAlive, let log else { return }
        while !recorder.backlog.isEmpty || recorder.pendingGap > 0 {
            do {
                if recorder.pendingGap > 0 {
                    try log.appendGap(count: recorder.pendingGap, device: Self.dongleAddress, at: wallClock)
                    audit.gapWritten += recorder.pendingGap
                    record(.disk("a gap record: \(recorder.pendingGap) readings dropped"))
                    recorder.pendingGap = 0
                }
                let count = min(recorder.backlog.count, Self.chunkSize)
                guard count > 0 else { break }
                try log.append(recorder.backlog[..<count].map(\.reading))
                recorder.backlog.removeFirst(count)
                recorder.waitingForRetry = false
                armSync()
            } catch {
                if disk.diedInWrite {
                    record(.disk("Tether died inside write(2): a torn record is left"))
                    killTether("inside a write (a torn record)")
                    schedule(.tetherStarts, after: random.duration(.seconds(1) ... .seconds(10)))
                    return
                }
                if !recorder.waitingForRetry { record(.disk("write failed: \(relative("\(error)")); retrying every second")) }
                recorder.waitingForRetry = true
                recorder.retryGeneration += 1
                schedule(.recorderRetry(generation: recorder.retryGeneration), after: settings.retryInterval)
                return
            }
        }
    }

    private func armSync() {
        guard !recorder.syncArmed else { return }
        recorder.syncArmed = true
        recorder.syncGeneration += 1
        schedule(.recorderSync(generation: recorder.syncGeneration), after: settings.flushInterval)
    }

    func recorderSync(generation: UInt64) {
        guard tetherAlive, generation == recorder.syncGeneration else { return }
        recorder.syncArmed = false
        record(.disk("sync"))
        try? log?.sync()
    }

    func recorderRetry(generation: UInt64) {
        guard tetherAlive, generation == recorder.retryGeneration, recorder.waitingForRetry else { return }
        drainBacklog()
    }
}
