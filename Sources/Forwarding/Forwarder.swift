import Configuration
import EventLoop
import FoundationEssentials
import Logging
import MQTT
import Pacing
import PayloadLayout
@_spi(FaultInjection) import Readings
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Delivers the readings log to an MQTT broker, at least once, from a
/// durable cursor: the log is the queue.
///
/// Threading: confined to `loop` (the MQTT client, the directory watch and
/// every callback run there); `status` may be read from any thread.
///
/// Invariants:
/// - the cursor only moves to a seq whose record, and every record before
///   it, the broker has acknowledged;
/// - only records the log holds durably are published: the forwarder reads
///   what `tether run` wrote before its own fsync (`flush_interval`), and a
///   power cut can take those records away; `tether run` then hands their
///   seqs out again to new readings, so a seq the broker had seen would name
///   two readings (consumers drop the second as a duplicate) and a cursor
///   past the log's end would skip the new ones. The forwarder fsyncs the
///   file it reads before publishing what it read, at most once per
///   `durableSyncInterval` (the writer's own rate): acknowledged ≤ published
///   ≤ durable, so the cursor never passes the durable log either;
/// - messages in flight plus messages acknowledged since the cursor was
///   last stored (fsynced) are at most `maxInflight`: a crash re-sends at
///   most that many. The cursor is stored at the end of the loop turn in
///   which half of that window was acknowledged, or `cursorStoreDelay`
///   after the first acknowledgement it holds: one fsync per half window,
///   not per message (an fsync per PUBACK held batch 1 at 1,850 records/s);
/// - after any broker loss, reading starts again from the cursor: what was
///   in flight is sent again (consumers drop duplicates by `seq`);
/// - records the log lost before they were delivered (retention) are
///   counted and logged as a gap, never waited for.
public final class Forwarder: @unchecked Sendable {
    public struct Settings: Sendable {
        public var readingsDirectory: String
        public var cursor: ForwardCursor
        public var client: MQTTClient.Options
        /// With `{device}` still in it; `{instance}` and `{hostname}` resolved.
        public var topic: String
        public var statusTopic: String
        public var qos: Int32
        public var batch: Int
        public var retryInitial: Duration = .seconds(1)
        public var retryMax: Duration = .seconds(60)
        /// The least time between two fsyncs of the log the forwarder makes
        /// before publishing (`readings.flush_interval`): records wait at
        /// most this long for it, and the disk sees no more fsyncs from the
        /// forwarder than from `tether run`.
        public var durableSyncInterval: Duration = .seconds(1)
        /// Replaces the fsync(2) of the log before publishing (tests).
        @_spi(FaultInjection) public var syncLog: (@Sendable (_ fd: Int32, _ path: String) throws -> Void)?
        /// Where `tether status` learns the forwarder's state; nil: nowhere.
        public var statusFile: ForwarderStatusFile?
        /// The payload's declared fields (`[decode]`): each published record
        /// gets a `fields` object beside its `hex`; nil: records as written.
        public var decode: PayloadLayout?

        public init(
            readingsDirectory: String, cursor: ForwardCursor, client: MQTTClient.Options, topic: String,
            statusTopic: String, qos: Int32, batch: Int, statusFile: ForwarderStatusFile? = nil
        ) {
            self.statusFile = statusFile
            self.readingsDirectory = readingsDirectory
            self.cursor = cursor
            self.client = client
            self.topic = topic
            self.statusTopic = statusTopic
            self.qos = qos
            self.batch = batch
        }
    }

    public struct Status: Sendable, Equatable {
        public var connected = false
        /// The last seq the broker acknowledged (the cursor).
        public var acknowledgedSeq: UInt64 = 0
        public var lastError: String?
        public var published: UInt64 = 0
        public var acknowledged: UInt64 = 0
        /// Records lost to retention before they were delivered.
        public var gapRecords: UInt64 = 0
        /// Readings whose payload did not fit `[decode]` (published with
        /// their hex alone), each counted once however often it is sent.
        public var undecodableRecords: UInt64 = 0
    }

    public let loop: EventLoop
    private let settings: Settings
    private let logger: Logger
    private let statusValue = Mutex(Status())

    // MARK: Loop-confined state
    private var client: MQTTClient?
    private var changes: DirectoryChanges?
    /// While the readings directory does not exist yet.
    private var appearance: DirectoryAppearance?
    private var reader: ReadingLogReader?
    private var queue: [Record] = []
    private var queueHead = 0
    /// A file was created since the reader last reached the end: the next
    /// read lists the directory (only then: a listing per append cost more
    /// than the rest of forwarding a record).
    private var listingPending = true
    /// The topic of the last message, and the device it was filled in for
    /// (one dongle per instance: filled in once, not per message).
    private var topicDevice: Substring?
    private var topic = ""
    /// Device values escaped for the topic and logged (a few: once each).
    private var escapedDevicesLogged: Set<String> = []
    private var inflight: [(messageID: Int32, lastSeq: UInt64, records: Int, acknowledged: Bool)] = []
    private var cursor: UInt64 = 0
    private var storedCursor: UInt64 = 0
    /// Messages acknowledged since the cursor was last stored.
    private var unstoredMessages = 0
    private var cursorStoreDue = false
    private var cursorStoreTimer: EventLoop.TimerID?
    /// The longest an acknowledged cursor waits to be stored, at low rates.
    static let cursorStoreDelay = Duration.milliseconds(200)
    private var expectedSeq: UInt64 = 1
    /// Undecodable records are counted up to here (a record read again
    /// after a broker loss is not counted twice).
    private var undecodableCountedThrough: UInt64 = 0
    /// Records up to this seq are durable in the log: they may be published.
    private var durableSeq: UInt64 = 0
    private var lastDurableSync: MonotonicInstant?
    private var durableSyncTimer: EventLoop.TimerID?
    private var turnEndHook: Int?
    /// Failed connects since the last that succeeded: the retry's place in `retryBackoff`.
    private var connectFailures = 0
    /// `retryInitial` doubling to `retryMax`, each retry spread by ±20 %
    /// (a fleet that lost its broker together does not come back in step).
    private var retryBackoff: Backoff { Backoff(first: settings.retryInitial, cap: settings.retryMax) }
    private var random = SplitMix64.seededBySystem()
    private var retryTimer: EventLoop.TimerID?
    private var lastRetryLog: MonotonicInstant?
    /// Steps of the system clock: a handshake that failed because the
    /// clock read a time before the broker's certificate is retried at once.
    private var clockSteps: ClockSteps?
    /// The wall clock, for the one message that reads it (tests set it).
    private let wallClock: @Sendable () -> Date
    private var stopping = false
    /// When the connection last changed (or the start), for the status file:
    /// on the wall clock and on the boot's clock (`BootStamp`).
    private var connectionSince = Date()
    private var connectionSinceBoot: BootStamp?
    /// The boot's id and CLOCK_BOOTTIME (the units give the id as
    /// TETHER_BOOT_ID where /proc/sys is hidden).
    private let bootClock = BootClock.system()
    private var writtenStatusFile: ForwarderStatusFile.Contents?
    private var statusFileFailing = false

    private struct Record {
        var seq: UInt64
        var device: Substring
        var line: [UInt8]
    }

    /// Records read ahead of the broker, at most; beyond, reading waits.
    private var readAhead: Int { max(1024, 4 * settings.client.maxInflight * settings.batch) }

    public init(settings: Settings, loop: EventLoop, logger: Logger, wallClock: @escaping @Sendable () -> Date = { Date() }) {
        self.settings = settings
        self.loop = loop
        self.logger = logger
        self.wallClock = wallClock
    }

    public var status: Status { statusValue.withLock { $0 } }

    private func updateStatus(_ change: (inout Status) -> Void) {
        statusValue.withLock { change(&$0) }
    }

    /// An error that is not the broker's: kept as the last error (for
    /// `status` and the status file) and logged, as `logged` if given.
    private func recordError(_ error: String, logged: String? = nil) {
        updateStatus { $0.lastError = error }
        logger.error("\(logged ?? error)")
        writeStatusFile()
    }

    // MARK: Starting and stopping

    public struct StartFailure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// Reads the cursor, prepares the client and starts connecting. Throws
    /// what no retry can fix (an unreadable cursor, bad TLS files).
    public func start() throws(StartFailure) {
        loop.checkIsolated()
        do {
            cursor = try settings.cursor.load()
        } catch {
            throw StartFailure(description: error.description)
        }
        storedCursor = cursor
        updateStatus { $0.acknowledgedSeq = cursor }
        var options = settings.client
        options.will = .init(topic: settings.statusTopic, payload: Array("offline".utf8), qos: 1, retain: true)
        do {
            let client = try MQTTClient(options: options, loop: loop)
            client.onEvent = { [unowned self] event in handle(event) }
            self.client = client
        } catch {
            throw StartFailure(description: "MQTT: \(error.description)")
        }
        if DirectoryAppearance.isDirectory(settings.readingsDirectory) {
            try watchReadings()
        } else {
            // At a first boot the forwarder may start before `tether run`
            // has created the directory: wait for it (a failure to read it
            // once it exists is the config's, and ends the start).
            logger.notice("waiting for the readings directory \(settings.readingsDirectory) to appear (tether run creates it)")
            try awaitReadingsDirectory()
        }
        turnEndHook = loop.addTurnEndHook { [unowned self] in
            if cursorStoreDue { storeCursor() }
        }
        restartReading()
        connectionChanged()
        writeStatusFile()
        watchClockSteps()
        connect()
    }

    /// Without the watch the forwarder still works; a handshake refused
    /// for the clock's sake is then retried only when the backoff says.
    private func watchClockSteps() {
        do throws(ClockSteps.Unavailable) {
            clockSteps = try ClockSteps(loop: loop, onSet: { [unowned self] in clockWasSet() }, onFailure: { [unowned self] error in
                clockSteps = nil
                logger.warning("\(error); a broker refused for the clock's sake is retried on the backoff only")
            })
        } catch {
            logger.warning("\(error); a broker refused for the clock's sake is retried on the backoff only")
        }
    }

    /// The system clock was set (NTP's first answer, an operator's `date`):
    /// whatever refused the last connect may pass now, a certificate the
    /// clock read as not valid yet above all. Connect now, with the backoff
    /// started afresh, rather than at the end of a wait of up to `retryMax`.
    @_spi(FaultInjection) public func clockWasSet() {
        loop.checkIsolated()
        guard !stopping, let pending = retryTimer else { return }
        loop.cancelTimer(pending)
        retryTimer = nil
        connectFailures = 0
        lastRetryLog = nil
        logger.notice("the system clock was set: connecting to the broker \(settings.client.host):\(settings.client.port) again now",
                      metadata: ["event": "broker-retry-clock-set"])
        connect()
    }

    /// Follows the readings directory's changes (it exists).
    private func watchReadings() throws(StartFailure) {
        do {
            changes = try DirectoryChanges(directory: settings.readingsDirectory, loop: loop) { [unowned self] result in
                switch result {
                case .success(let changes):
                    if changes.needsListing { listingPending = true }
                    readMore()
                    pump()
                case .failure(let error):
                    // Removed or moved (`tether run` makes it again, and
                    // writes back the file it was appending to): forward
                    // again from the cursor once it is back.
                    changes?.close()
                    do throws(StartFailure) {
                        try awaitReadingsDirectory()
                        recordError(error.description, logged: "\(error.description): forwarding again from seq \(cursor + 1) once it is back")
                    } catch {
                        recordError(
                            error.description,
                            logged: "\(error.description): no new readings will be forwarded; restart tether forward once the directory is back"
                        )
                    }
                }
            }
        } catch {
            throw StartFailure(description: error.description)
        }
    }

    /// Waits for the readings directory to be there, then follows it from
    /// the cursor.
    private func awaitReadingsDirectory() throws(StartFailure) {
        let directory = settings.readingsDirectory
        do {
            appearance = try DirectoryAppearance(path: directory, loop: loop) { [unowned self] in
                appearance = nil
                logger.notice("the readings directory \(directory) is there: forwarding from it")
                do throws(StartFailure) {
                    try watchReadings()
                } catch {
                    recordError(error.description)
                }
                restartReading()
                pump()
            }
        } catch {
            throw StartFailure(description: error.description)
        }
    }

    /// Publishes `offline` (retained), disconnects and stores the cursor.
    public func stop() {
        loop.checkIsolated()
        stopping = true
        if let retryTimer { loop.cancelTimer(retryTimer) }
        retryTimer = nil
        clockSteps?.stop()
        clockSteps = nil
        if let durableSyncTimer { loop.cancelTimer(durableSyncTimer) }
        durableSyncTimer = nil
        if let client, client.isConnected {
            _ = try? client.publish(.init(topic: settings.statusTopic, payload: Array("offline".utf8), qos: 1, retain: true))
        }
        client?.close()
        client = nil
        changes?.close()
        changes = nil
        appearance?.close()
        appearance = nil
        if let turnEndHook { loop.removeTurnEndHook(turnEndHook) }
        turnEndHook = nil
        storeCursor()  // also cancels its timer, and schedules none while stopping
        updateStatus { $0.connected = false }
        connectionChanged()
        writeStatusFile(running: false)
    }

    // MARK: The broker

    private func connect() {
        guard !stopping, let client else { return }
        do {
            try client.connect()
        } catch {
            lost(error)
        }
    }

    private func handle(_ event: MQTTClient.Event) {
        switch event {
        case .connected:
            connectFailures = 0
            lastRetryLog = nil
            updateStatus { $0.connected = true; $0.lastError = nil }
            connectionChanged()
            writeStatusFile()
            logger.info("connected to the broker \(settings.client.host):\(settings.client.port); forwarding after seq \(cursor)",
                        metadata: ["event": "broker-connected"])
            _ = try? client?.publish(.init(topic: settings.statusTopic, payload: Array("online".utf8), qos: 1, retain: true))
            pump()
        case .disconnected(let error):
            lost(error)
        case .published(let messageID):
            acknowledged(messageID)
        }
    }

    /// The broker is gone or refused us: everything in flight will be read
    /// again from the cursor; retry with backoff and jitter, logged at most
    /// once a minute. A refusal of our credentials or a failed TLS handshake
    /// is retried too (the broker's side may be what changes), but logged as
    /// an error naming the settings to check.
    private func lost(_ error: MQTTError) {
        var why = error.description
        if error.certificateRejection?.reason == .notYetValid { why = clockBeforeCertificate(error) }
        let wasConnected = status.connected
        updateStatus { $0.connected = false; $0.lastError = why }
        guard !stopping else { return }
        if wasConnected { connectionChanged() }
        writeStatusFile()
        let now = MonotonicInstant.now
        let retryDelay = retryBackoff.delay(afterFailures: connectFailures)
        let retrying = "retrying in \(DurationText.rounded(retryDelay)), then at most every \(DurationText.rounded(settings.retryMax))"
        if wasConnected {
            logger.warning("lost the broker: \(why)", metadata: ["event": "broker-lost"])
        } else if lastRetryLog.map({ $0.duration(to: now) >= .seconds(60) }) ?? true {
            lastRetryLog = now
            if error.isCredentialRefusal {
                logger.error("\(why): check mqtt.username and mqtt.password_file; \(retrying)",
                             metadata: ["event": "broker-refused"])
            } else if error.certificateRejection?.reason == .notYetValid {
                logger.error("\(why); every record is kept, and the forwarder connects as soon as the clock is set; meanwhile \(retrying)",
                             metadata: ["event": "broker-tls-clock"])
            } else if error.kind == .tls {
                logger.error("\(why): check mqtt.ca_file (and cert_file, key_file for mutual TLS) and the broker's certificate; \(retrying)",
                             metadata: ["event": "broker-tls-failed"])
            } else {
                logger.warning("cannot reach the broker: \(why); \(retrying)", metadata: ["event": "broker-unreachable"])
            }
        }
        restartReading()
        let delay = Backoff.jittered(retryDelay, by: 0.2, unit: random.nextUnit())
        connectFailures += 1
        if let retryTimer { loop.cancelTimer(retryTimer) }
        retryTimer = loop.schedule(after: delay) { [unowned self] in
            retryTimer = nil
            connect()
        }
    }

    /// A certificate of the broker's chain is not valid yet at the clock's
    /// reading: on a gateway without a real-time clock, a clock not set
    /// since boot (1970, or the last shutdown's time). Not the CA file's
    /// fault, so the message does not send the operator there.
    private func clockBeforeCertificate(_ error: MQTTError) -> String {
        let reading = UTCTimestamp.string(wallClock())
        let state = switch BootClock.clockSynchronised() {
        case true: "synchronised"
        case false: "not synchronised"
        case nil: "synchronisation unknown"
        }
        return "the system clock reads \(reading) (\(state)); TLS to \(settings.client.host) cannot be verified until the clock is set (\(error.description))"
    }

    // MARK: Reading and publishing

    /// Forgets what was read ahead and in flight; reads on from the cursor.
    private func restartReading() {
        inflight.removeAll()
        queue.removeAll()
        queueHead = 0
        expectedSeq = cursor + 1
        listingPending = true
        guard appearance == nil else {
            reader = nil  // the directory is not there yet
            return
        }
        do {
            let reader = try ReadingLogReader(directory: settings.readingsDirectory, afterSeq: cursor)
            if let syncLog = settings.syncLog { reader.syncCall = syncLog }
            self.reader = reader
        } catch {
            reader = nil
            recordError("\(error)", logged: "cannot read the readings directory: \(error)")
        }
        readMore()
    }

    /// Tops the queue up from the log, up to `readAhead` records.
    private func readMore() {
        guard let reader else { return }
        while queue.count - queueHead < readAhead {
            var stoppedEarly = false
            do {
                stoppedEarly = try reader.readAvailable(listDirectory: listingPending, limit: 256 << 10) { [unowned self] batch in
                    take(batch)
                }
            } catch {
                recordError("\(error)", logged: "reading the readings log: \(error)")
                return
            }
            if !stoppedEarly {
                listingPending = false
                return
            }
        }
    }

    private func take(_ batch: UnsafeRawBufferPointer) {
        if queueHead > 0, queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        }
        var start = 0
        while start < batch.count {
            var end = start
            while end < batch.count, batch[end] != UInt8(ascii: "\n") { end += 1 }
            let line = UnsafeRawBufferPointer(rebasing: batch[start..<end])
            start = end + 1
            guard let seq = ReadingLogReader.seq(ofRecord: line) else { continue }
            if seq > expectedSeq {
                let missing = seq - expectedSeq
                updateStatus { $0.gapRecords += missing }
                logger.warning("\(missing) readings (seq \(expectedSeq)…\(seq - 1)) left the log before they were forwarded",
                               metadata: ["event": "forward-gap", "count": "\(missing)"])
                writeStatusFile()
            }
            expectedSeq = seq + 1
            queue.append(Record(seq: seq, device: Self.device(of: line), line: settings.decode.map { decoded(line, seq: seq, layout: $0) } ?? Array(line)))
        }
    }

    /// The line with its payload's fields, or as it is when the payload
    /// does not fit the declaration (counted; the first one logged).
    private func decoded(_ line: UnsafeRawBufferPointer, seq: UInt64, layout: PayloadLayout) -> [UInt8] {
        switch RecordFields.annotate(line, with: layout) {
        case .decoded(let annotated):
            return annotated
        case .undecodable(let length):
            if seq > undecodableCountedThrough {
                undecodableCountedThrough = seq
                let count = status.undecodableRecords + 1
                updateStatus { $0.undecodableRecords = count }
                // The status file at the 1st, 2nd, 4th, 8th… (a few writes,
                // however many arrive); the metric counts each.
                if count & (count - 1) == 0 { writeStatusFile() }
                if count == 1 {
                    logger.warning(
                        "record seq \(seq): its payload is \(length) bytes, [decode] declares \(layout.size): published with its hex alone (such records are counted: tether status, tether_forward_undecodable_records_total)",
                        metadata: ["event": "forward-undecodable"])
                }
            }
            return Array(line)
        case .notDescribed:
            return Array(line)
        }
    }

    /// Publishes while there is room in flight.
    private func pump() {
        guard let client, client.isConnected, !stopping else { return }
        while inflight.count + unstoredMessages < settings.client.maxInflight {
            if queueHead == queue.count { readMore() }
            guard queueHead < queue.count else { return }
            guard queue[queueHead].seq <= durableSeq || makeQueueDurable() else { return }
            let device = queue[queueHead].device
            var payload: [UInt8] = []
            var lastSeq: UInt64 = 0
            var count = 0
            while queueHead < queue.count, count < settings.batch, queue[queueHead].device == device,
                  queue[queueHead].seq <= durableSeq {
                if count > 0 { payload.append(UInt8(ascii: "\n")) }
                payload += queue[queueHead].line
                lastSeq = queue[queueHead].seq
                queueHead += 1
                count += 1
            }
            if device != topicDevice {
                topicDevice = device
                let level = Self.topicLevel(device: device)
                topic = settings.topic.replacing("{device}", with: level)
                if level != device, escapedDevicesLogged.count < 64, escapedDevicesLogged.insert(level).inserted {
                    logger.warning(
                        "record seq \(lastSeq): its device holds characters an MQTT topic level cannot (+ # / NUL, control characters): published, as its records will be, to \(topic)",
                        metadata: ["event": "forward-device-escaped"]
                    )
                }
            }
            do {
                let messageID = try client.publish(.init(topic: topic, payload: payload, qos: settings.qos))
                inflight.append((messageID, lastSeq, count, false))
                updateStatus { $0.published += UInt64(count) }
            } catch {
                return lost(error)
            }
        }
    }

    /// Fsyncs the file being read, so that every record queued so far may be
    /// published; false when that must wait (the last sync was less than
    /// `durableSyncInterval` ago, or it failed): a timer then pumps again.
    private func makeQueueDurable() -> Bool {
        guard durableSyncTimer == nil, let reader, let last = queue.last?.seq else { return false }
        let now = MonotonicInstant.now
        if let lastDurableSync {
            let since = lastDurableSync.duration(to: now)
            if since < settings.durableSyncInterval {
                scheduleDurableSync(after: settings.durableSyncInterval - since)
                return false
            }
        }
        lastDurableSync = now
        do {
            // Records of files read before this one are covered too: once
            // this file is durable, recovery goes on after its first seq.
            try reader.syncRead()
        } catch {
            recordError("\(error)", logged: "cannot make the readings durable before publishing them: \(error)")
            scheduleDurableSync(after: .seconds(1))
            return false
        }
        durableSeq = last
        return true
    }

    private func scheduleDurableSync(after delay: Duration) {
        durableSyncTimer = loop.schedule(after: delay) { [unowned self] in
            durableSyncTimer = nil
            pump()
        }
    }

    private func acknowledged(_ messageID: Int32) {
        guard let index = inflight.firstIndex(where: { $0.messageID == messageID && !$0.acknowledged }) else { return }
        inflight[index].acknowledged = true
        var records = 0
        while let first = inflight.first, first.acknowledged {
            cursor = first.lastSeq
            records += first.records
            unstoredMessages += 1
            inflight.removeFirst()
        }
        if records > 0 {
            updateStatus { $0.acknowledgedSeq = cursor; $0.acknowledged += UInt64(records) }
            if unstoredMessages >= max(1, settings.client.maxInflight / 2) {
                cursorStoreDue = true
            } else if cursorStoreTimer == nil {
                cursorStoreTimer = loop.schedule(after: Self.cursorStoreDelay) { [unowned self] in
                    cursorStoreTimer = nil
                    storeCursor()
                }
            }
        }
        pump()
    }

    /// Stores the cursor (one fsync for every acknowledgement since the
    /// last), which frees their room in the window; publishing goes on in a
    /// turn of its own. A failure keeps the room taken and retries in a second.
    private func storeCursor() {
        cursorStoreDue = false
        if let cursorStoreTimer { loop.cancelTimer(cursorStoreTimer) }
        cursorStoreTimer = nil
        guard cursor != storedCursor || unstoredMessages > 0 else { return }
        do throws(ForwardCursor.Failure) {
            try settings.cursor.store(cursor)
            storedCursor = cursor
            unstoredMessages = 0
            if !stopping { loop.execute { [weak self] in self?.pump() } }
        } catch {
            recordError(error.description)
            if !stopping {
                cursorStoreTimer = loop.schedule(after: .seconds(1)) { [unowned self] in
                    cursorStoreTimer = nil
                    storeCursor()
                }
            }
        }
    }

    /// Tells `tether status` what changed; written only when it differs
    /// from what was written last, and a failure logged once until it heals.
    private func connectionChanged() {
        connectionSince = wallClock()
        connectionSinceBoot = bootClock.now()
    }

    private func writeStatusFile(running: Bool = true) {
        guard let file = settings.statusFile else { return }
        let now = status
        let contents = ForwarderStatusFile.Contents(
            pid: getpid(), running: running, broker: "\(settings.client.host):\(settings.client.port)",
            readingsDirectory: settings.readingsDirectory, connected: now.connected, since: connectionSince,
            sinceBootMs: connectionSinceBoot?.sinceBootMilliseconds,
            bootId: connectionSinceBoot?.bootID, lastError: now.lastError, gapRecords: now.gapRecords,
            undecodableRecords: settings.decode == nil ? nil : now.undecodableRecords
        )
        guard contents != writtenStatusFile else { return }
        do {
            try file.write(contents)
            writtenStatusFile = contents
            statusFileFailing = false
        } catch {
            if !statusFileFailing { logger.error("\(error.description); tether status will not show the forwarder") }
            statusFileFailing = true
        }
    }

    /// `device` as one MQTT topic level, for `{device}`: what a topic name
    /// must not hold (the wildcards `+` and `#`, NUL; libmosquitto also
    /// refuses control characters and Unicode non-characters) and what would
    /// change its shape (`/`, a level separator) are percent-escaped, their
    /// UTF-8 bytes as `%XX` (and `%` itself, so that two devices never share
    /// a topic), and the level is cut at 256 bytes. Publishing such a topic
    /// fails (MOSQ_ERR_INVAL), which the forwarder took for a broker loss and
    /// retried from the cursor, forever, on the same record: one such record
    /// (a log written by hand, a dongle's odd address) stopped forwarding.
    /// Addresses (`AA:BB:CC:DD:EE:FF`) and `unknown` are unchanged.
    public static func topicLevel(device: Substring) -> String {
        func escapes(_ scalar: Unicode.Scalar) -> Bool {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F: true  // C0, DEL, C1 (NUL among them)
            case 0x23, 0x25, 0x2B, 0x2F: true  // # % + /
            case 0xFDD0...0xFDEF: true  // non-characters
            case let value where value & 0xFFFE == 0xFFFE: true  // U+xFFFE, U+xFFFF
            default: false
            }
        }
        guard device.unicodeScalars.contains(where: escapes) || device.utf8.count > 256 else { return String(device) }
        let hex = Array("0123456789ABCDEF".utf8)
        var level: [UInt8] = []
        for scalar in device.unicodeScalars {
            var encoded: [UInt8] = []
            if escapes(scalar) {
                for byte in String(scalar).utf8 { encoded += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]] }
            } else {
                encoded = Array(String(scalar).utf8)
            }
            guard level.count + encoded.count <= 256 else { break }
            level += encoded
        }
        return String(decoding: level, as: UTF8.self)
    }

    /// The `device` field of a record line (`"device":"AA:BB:…"`), or "unknown".
    static func device(of line: UnsafeRawBufferPointer) -> Substring {
        let key = Array(#""device":""#.utf8)
        guard line.count > key.count else { return "unknown" }
        var index = 0
        while index + key.count < line.count {
            if line[index] == key[0], UnsafeRawBufferPointer(rebasing: line[index..<index + key.count]).elementsEqual(key) {
                let start = index + key.count
                var end = start
                while end < line.count, line[end] != UInt8(ascii: "\"") { end += 1 }
                return Substring(String(decoding: UnsafeRawBufferPointer(rebasing: line[start..<end]), as: UTF8.self))
            }
            index += 1
        }
        return "unknown"
    }
}
