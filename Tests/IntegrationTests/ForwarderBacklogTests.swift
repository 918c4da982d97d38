import EventLoop
@_spi(FaultInjection) import Forwarding
import Foundation
import Logging
import MQTT
import PayloadLayout
import Readings
import Synchronization
import Systemd
import TestSupport
import Testing

/// The forwarder against logs written directly (no daemon): a long outage's
/// backlog, and retention that deleted what was never delivered.
@Suite(.serialized) struct ForwarderBacklogTests {
    static func reading(_ n: UInt32) -> Reading {
        let bytes = withUnsafeBytes(of: n.littleEndian) { Array($0) } + [0, 0, 0, 0]
        return Reading(device: "AA:BB:CC:DD:EE:FF", characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: bytes)
    }

    static func settings(readings: String, state: String, port: Int, batch: Int) -> Forwarder.Settings {
        Forwarder.Settings(
            readingsDirectory: readings, cursor: ForwardCursor(path: state + "/cursor"),
            client: MQTTClient.Options(host: "127.0.0.1", port: port, clientID: "tether-forward-backlog", keepalive: .seconds(10)),
            topic: "tether/test/{device}/readings", statusTopic: "tether/test/status", qos: 1, batch: batch
        )
    }

    /// 100,000 records on disk before the forwarder starts: all of them
    /// reach the broker, and the cursor ends at the last.
    @Test func aLongOutagesBacklogIsCaughtUp() async throws {
        let directory = try TemporaryDirectory("forward-backlog")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        let log = try ReadingLog(directory: readings, rotateSize: 4 << 20, retainSize: 1 << 30)
        for chunk in 0..<100 {
            try log.append((0..<1000).map { Self.reading(UInt32(chunk * 1000 + $0 + 1)) })
        }
        log.close()
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "tether/test/+/readings", directory: directory.url)
        defer { subscriber.stop() }
        try await Task.sleep(for: .milliseconds(300))
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        let started = ContinuousClock.now
        let forwarder = try await ForwarderTests.RunningForwarder(
            Self.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 100))
        let caughtUp = await eventually(timeout: .seconds(60), every: .milliseconds(100)) {
            forwarder.forwarder.status.acknowledgedSeq == 100_000
        }
        let elapsed = ContinuousClock.now - started
        let delivered = await eventually(timeout: .seconds(30), every: .milliseconds(200)) {
            Set(ForwarderTests.sequences(subscriber.lines)).count == 100_000
        }
        await forwarder.stop()
        let cursor = try ForwardCursor(path: directory.path + "/state/cursor").load()
        print("figure: forward backlog of 100,000 records (batch 100): acknowledged in \(elapsed)")
        #expect(caughtUp)
        #expect(delivered)
        #expect(cursor == 100_000)
    }

    /// Retention deleted the oldest files before they were forwarded: the
    /// forwarder counts the lost records and goes on with the rest.
    @Test func recordsRetentionDeletedAreCountedAsAGap() async throws {
        let directory = try TemporaryDirectory("forward-gap")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        // Small files and a small retention: the oldest files go.
        let log = try ReadingLog(directory: readings, rotateSize: 16 << 10, retainSize: 64 << 10)
        for chunk in 0..<20 {
            try log.append((0..<100).map { Self.reading(UInt32(chunk * 100 + $0 + 1)) })
        }
        log.close()
        let first = try #require(try ReadingLog.readRecords(directory: readings).first?.seq)
        #expect(first > 1, "retention deleted the first files")
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        // The journal's view: TETHER_EVENT fields, as journalctl filters them.
        let journal = try DatagramReceiver(address: directory.path + "/journal")
        let socketPath = journal.address
        let logger = Logger(label: "tether-forward") { JournalLogHandler(label: $0, level: .info, socketPath: socketPath) }
        var settings = Self.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 10)
        settings.statusFile = ForwarderStatusFile(path: directory.path + "/state/status.json")
        let forwarder = try await ForwarderTests.RunningForwarder(settings, logger: logger)
        let done = await eventually(timeout: .seconds(20)) { forwarder.forwarder.status.acknowledgedSeq == 2000 }
        let status = forwarder.forwarder.status
        let file = try #require(try settings.statusFile?.read())
        broker.stop()
        var entries: [ParsedJournalEntry] = []
        _ = await eventually(timeout: .seconds(5)) {
            while let datagram = try? journal.receive() {
                if let entry = try? ParsedJournalEntry(datagram.passedFile ?? datagram.payload) { entries.append(entry) }
            }
            return entries.contains { $0["TETHER_EVENT"] == "broker-lost" }
        }
        await forwarder.stop()
        #expect(done)
        #expect(status.gapRecords == first - 1, "the records before seq \(first) are counted as lost")
        #expect(status.acknowledged == 2000 - (first - 1), "records acknowledged, counted once each")
        #expect(file.gapRecords == first - 1 && file.running && file.readingsDirectory == readings, "\(file)")
        let gap = try #require(entries.first { $0["TETHER_EVENT"] == "forward-gap" }, "\(entries.compactMap { $0["TETHER_EVENT"] })")
        #expect(gap["TETHER_COUNT"] == "\(first - 1)" && gap["PRIORITY"] == "4", "\(gap)")
        #expect(entries.contains { $0["TETHER_EVENT"] == "broker-connected" && $0["PRIORITY"] == "6" })
        #expect(entries.contains { $0["TETHER_EVENT"] == "broker-lost" && $0["PRIORITY"] == "4" })
        let stopped = try #require(try settings.statusFile?.read())
        #expect(!stopped.running && !stopped.connected, "at stop the file says so: \(stopped)")
    }

    /// At a first boot the forwarder may start before `tether run` created
    /// the readings directory (two levels of it, here): it waits for it,
    /// watching the nearest ancestor, and forwards what is then written.
    @Test func aReadingsDirectoryThatDoesNotExistYetIsWaitedFor() async throws {
        try await Self.expectForwardingOnceTheDirectoryAppears("forward-appear", records: 100) { instance in
            try FileManager.default.createDirectory(atPath: instance, withIntermediateDirectories: true)
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// systemd creates a `StateDirectory=` as root, 0750, and only then
    /// hands it to the service's user: for a moment the forwarder cannot
    /// watch it (EACCES). Played here as a directory made 0000 and opened up
    /// a moment later, with the readings directory created at once inside
    /// it. Root is never refused a watch, so as root this runs the plain
    /// path (still a check of the move-then-look-again order).
    @Test func aReadingsDirectoryWhoseParentIsHandedOverLateIsStillSeen() async throws {
        try await Self.expectForwardingOnceTheDirectoryAppears("forward-handover", records: 50) { instance in
            #expect(mkdir(instance, 0) == 0)
            try await Task.sleep(for: .milliseconds(200))
            #expect(chmod(instance, 0o755) == 0)
        }
    }

    /// Someone removes the readings directory while the forwarder follows it;
    /// the writer (`tether run`'s log) makes it again and writes back the file
    /// it was appending to. The forwarder goes back to waiting for the
    /// directory and forwards on from its cursor: every record is acknowledged,
    /// none needs a restart.
    @Test func aReadingsDirectoryRemovedAndMadeAgainIsFollowedAgain() async throws {
        let directory = try TemporaryDirectory("forward-removed")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        let log = try ReadingLog(directory: readings, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((1...50).map { Self.reading($0) })
        try log.sync()
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        let forwarder = try await ForwarderTests.RunningForwarder(
            Self.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 10))
        #expect(await eventually(timeout: .seconds(10)) { forwarder.forwarder.status.acknowledgedSeq == 50 })
        try FileManager.default.removeItem(atPath: readings)
        #expect(await eventually { forwarder.forwarder.status.lastError?.contains("deleted or moved") == true })
        try log.append((51...80).map { Self.reading($0) })
        try log.sync()  // writes the file back, in a new directory
        #expect(log.restoredFiles.count == 1)
        try log.append((81...100).map { Self.reading($0) })
        try log.sync()
        log.close()
        let done = await eventually(timeout: .seconds(10)) { forwarder.forwarder.status.acknowledgedSeq == 100 }
        await forwarder.stop()
        #expect(done, "\(forwarder.forwarder.status)")
    }

    /// A forwarder started (and connected to a broker) before
    /// `instance/readings` exists; `appear` makes `instance` its own way,
    /// then `records` are written to `instance/readings` at once: every one
    /// must be acknowledged.
    private static func expectForwardingOnceTheDirectoryAppears(
        _ label: String, records: UInt32, appear: (String) async throws -> Void
    ) async throws {
        let directory = try TemporaryDirectory(label)
        defer { directory.remove() }
        let instance = directory.path + "/instance"
        let readings = instance + "/readings"
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        let forwarder = try await ForwarderTests.RunningForwarder(
            settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 10))
        #expect(await eventually { forwarder.forwarder.status.connected }, "it connects meanwhile")
        try await appear(instance)
        let log = try ReadingLog(directory: readings, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((1...records).map { reading($0) })
        log.close()
        let done = await eventually(timeout: .seconds(10)) { forwarder.forwarder.status.acknowledgedSeq == UInt64(records) }
        await forwarder.stop()
        #expect(done, "\(forwarder.forwarder.status)")
    }

    struct PlantedEIO: Error, CustomStringConvertible {
        var description: String { "fsync: Input/output error (planted)" }
    }

    /// What the forwarder publishes, the log holds durably: a power cut may
    /// take records written but not yet fsynced, and their seqs are then
    /// handed out again, so a published seq must never be one of those. An
    /// fsync that fails publishes nothing (and says why); after it heals,
    /// everything goes; later records wait for the next sync, at most one
    /// per `durableSyncInterval`.
    @Test func onlyRecordsTheLogHoldsDurablyArePublished() async throws {
        let directory = try TemporaryDirectory("forward-durable")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        let log = try ReadingLog(directory: readings, rotateSize: 1 << 20, retainSize: 1 << 30)
        try log.append((1...100).map { Self.reading(UInt32($0)) })
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        let failing = Mutex(true)
        let syncs = Mutex(0)
        var settings = Self.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 10)
        settings.durableSyncInterval = .seconds(2)
        settings.syncLog = { _, path in
            if failing.withLock({ $0 }) { throw PlantedEIO() }
            if path != readings { syncs.withLock { $0 += 1 } }  // the file, not its directory
        }
        let forwarder = try await ForwarderTests.RunningForwarder(settings)
        #expect(await eventually { forwarder.forwarder.status.connected })
        #expect(await eventually { forwarder.forwarder.status.lastError?.contains("planted") == true },
                "\(forwarder.forwarder.status)")
        try await Task.sleep(for: .milliseconds(500))
        #expect(forwarder.forwarder.status.published == 0, "nothing before the log is durable: \(forwarder.forwarder.status)")

        failing.withLock { $0 = false }
        #expect(await eventually(timeout: .seconds(5)) { forwarder.forwarder.status.acknowledgedSeq == 100 },
                "\(forwarder.forwarder.status)")
        let firstSync = ContinuousClock.now
        #expect(syncs.withLock { $0 } == 1)

        try log.append((101...110).map { Self.reading(UInt32($0)) })
        try await Task.sleep(for: .milliseconds(800))
        #expect(forwarder.forwarder.status.published == 100, "the new records wait for the next sync")
        #expect(await eventually(timeout: .seconds(5)) { forwarder.forwarder.status.acknowledgedSeq == 110 },
                "\(forwarder.forwarder.status)")
        let waited = ContinuousClock.now - firstSync
        #expect(syncs.withLock { $0 } == 2)
        #expect(waited >= .milliseconds(1500), "one sync per interval: \(waited)")
        log.close()
        await forwarder.stop()
    }

    /// With [decode], each published record carries `fields` beside its
    /// `hex`; a payload of another length is published with its hex alone
    /// and counted once (not again when read again after a broker loss).
    @Test func declaredFieldsArePublishedBesideTheHexAndMisfitsCounted() async throws {
        let directory = try TemporaryDirectory("forward-decode")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        let log = try ReadingLog(directory: readings, rotateSize: 4 << 20, retainSize: 1 << 30)
        var batch = (1...9).map { Self.reading(UInt32($0)) }
        // The 10th comes from another firmware: 5 bytes.
        batch.append(Reading(device: "AA:BB:CC:DD:EE:FF", characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: [10, 0, 0, 0, 1]))
        try log.append(batch)
        log.close()
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "tether/test/+/readings", directory: directory.url)
        defer { subscriber.stop() }
        try await Task.sleep(for: .milliseconds(300))
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        var settings = Self.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 1)
        settings.decode = try PayloadLayout(fields: [
            try .parse("sequence:u32le"), try .parse("_:u16le"), try .parse("humidity:u16le*0.01"),
        ])
        let forwarder = try await ForwarderTests.RunningForwarder(settings)
        #expect(await eventually { subscriber.lines.count == 10 }, "\(subscriber.lines)")
        await forwarder.stop()
        let lines = subscriber.lines
        #expect(lines.first?.hasSuffix(#","hex":"0100000000000000","v":2,"#) == false, "fields follow the record's own keys")
        #expect(lines.first?.contains(#""hex":"0100000000000000""#) == true, "\(lines.first ?? "")")
        #expect(lines.first?.hasSuffix(#","fields":{"sequence":1,"humidity":0}}"#) == true, "\(lines.first ?? "")")
        #expect(lines.filter { $0.contains(#""fields":"#) }.count == 9)
        #expect(lines.last?.contains(#""hex":"0a00000001""#) == true && lines.last?.contains("fields") == false, "\(lines.last ?? "")")
        #expect(forwarder.forwarder.status.undecodableRecords == 1)
        print("figure: a decoded record as published: \(lines.first ?? "")")
    }
}
