import Foundation
import Logging
import MetricsTextfile
import TestSupport
import Testing

/// The textfile: written whole for node_exporter to read, and a failure
/// logged once rather than every interval.
@Suite struct MetricsTextfileWriterTests {
    @Test func theFileIsReplacedWholeAndReadableByNodeExporter() throws {
        let directory = try TemporaryDirectory("metrics-textfile")
        defer { directory.remove() }
        let registry = MetricsRegistry(instanceName: "default")
        let counter = registry.counter("tether_test_total", help: "A counter for the test.")
        let path = directory.path + "/tether.prom"
        let writer = MetricsTextfileWriter(path: path, registry: registry, logger: Logger(label: "test"))
        counter.increment(by: 41)
        #expect(writer.write() != nil)
        counter.increment()
        let size = try #require(writer.write())
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.utf8.count == size)
        #expect(text.contains("# HELP tether_test_total A counter for the test."))
        #expect(PrometheusSamples(text).value("tether_test_total", ["instance_name": "default"]) == 42)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o644, "node_exporter's user reads it")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["tether.prom"], "no temporary file left")
    }

    @Test func aFailureIsLoggedOnceAndItsEndOnce() throws {
        let directory = try TemporaryDirectory("metrics-textfile")
        defer { directory.remove() }
        let capture = LogCapture()
        let logger = Logger(label: "test") { _ in CapturingLogHandler(capture: capture) }
        let missing = directory.path + "/not-yet"
        let writer = MetricsTextfileWriter(path: missing + "/tether.prom", registry: MetricsRegistry(instanceName: "default"), logger: logger)
        #expect(writer.write() == nil)
        #expect(writer.write() == nil)
        #expect(capture.all.count == 1)
        #expect(capture.all.first?.contains("cannot write \(missing)/tether.prom") == true)
        #expect(capture.all.first?.contains("ReadWritePaths") == true, "says what to check")
        try FileManager.default.createDirectory(atPath: missing, withIntermediateDirectories: false)
        #expect(writer.write() != nil)
        #expect(writer.write() != nil)
        #expect(capture.all.count == 2)
        #expect(capture.all.last?.contains("works again") == true)
    }

    @Test func runWritesAtOnceAndThenEveryIntervalOfItsClock() async throws {
        let directory = try TemporaryDirectory("metrics-textfile")
        defer { directory.remove() }
        let registry = MetricsRegistry(instanceName: "default")
        let path = directory.path + "/tether.prom"
        let writer = MetricsTextfileWriter(path: path, registry: registry, logger: Logger(label: "test"))
        let refreshes = LogCapture()
        let clock = SteppedClock()
        let task = Task {
            await writer.run(every: .seconds(15), on: clock) { refreshes.append("refresh") }
        }
        #expect(await eventually(timeout: .seconds(5)) { refreshes.all.count == 1 && clock.sleepers == 1 })
        #expect(FileManager.default.fileExists(atPath: path))
        clock.advance(by: .seconds(14))
        try await Task.sleep(for: .milliseconds(50))
        #expect(refreshes.all.count == 1, "nothing before the interval")
        clock.advance(by: .seconds(1))
        #expect(await eventually(timeout: .seconds(5)) { refreshes.all.count == 2 })
        task.cancel()
        await task.value
    }
}

/// A clock that moves only when the test says so.
final class SteppedClock: Clock, @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private let lock = NSLock()
    private var current = Instant(offset: .zero)
    private var nextID = 0
    private var waiting: [Int: (deadline: Instant, continuation: CheckedContinuation<Void, any Error>)] = [:]

    var now: Instant { lock.withLock { current } }
    var minimumResolution: Duration { .nanoseconds(1) }
    var sleepers: Int { lock.withLock { waiting.count } }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = lock.withLock { () -> Int in
            nextID += 1
            return nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let due = lock.withLock { () -> Bool in
                    if deadline <= current || Task.isCancelled { return true }
                    waiting[id] = (deadline, continuation)
                    return false
                }
                if due { continuation.resume() }
            }
        } onCancel: {
            let continuation = lock.withLock { waiting.removeValue(forKey: id)?.continuation }
            continuation?.resume(throwing: CancellationError())
        }
        try Task.checkCancellation()
    }

    func advance(by duration: Duration) {
        let due = lock.withLock { () -> [CheckedContinuation<Void, any Error>] in
            current = current.advanced(by: duration)
            let due = waiting.filter { $0.value.deadline <= current }
            for id in due.keys { waiting[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }
}
