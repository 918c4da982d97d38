import Foundation
import Logging
import Synchronization
@testable import Systemd
import TestSupport
import Testing

/// The log's writer may stall (journald busy or restarting): the thread that
/// logs must not wait for it, memory must stay bounded, and the lines lost
/// must be counted and reported.
@Suite struct BoundedLogQueueTests {
    /// A writer that blocks until the gate opens, recording what it wrote.
    final class GatedWriter: Sendable {
        let written = Mutex<[String]>([])
        let gate = DispatchSemaphore(value: 0)
        let blocked = Atomic<Bool>(true)
        /// Signalled when a write finds the gate shut and waits.
        let waiting = DispatchSemaphore(value: 0)

        func write(_ line: String) {
            if blocked.load(ordering: .acquiring) {
                waiting.signal()
                gate.wait()
            }
            written.withLock { $0.append(line) }
        }

        func open() {
            blocked.store(false, ordering: .releasing)
            gate.signal()
        }
    }

    @Test func aStalledWriterCostsBoundedMemoryAndCountedDrops() {
        let writer = GatedWriter()
        let queue = BoundedLogQueue<String>(
            label: "test.log", limit: 1000, deliver: { writer.write($0) },
            notice: { dropped, _ in "dropped \(dropped)" })
        // Each line 10 bytes: the writer takes the first and blocks; 100
        // more fit, the rest are dropped. None of these calls waits. The
        // first is in the writer before the rest come: a writer thread that
        // started late would take a batch with drops in it first, and what
        // fits after would follow that notice (CI saw it once).
        queue.submit(String(format: "line %04d\n", 0), size: 10)
        writer.waiting.wait()
        for index in 1..<1000 {
            queue.submit(String(format: "line %04d\n", index), size: 10)
            #expect(queue.queuedBytes <= queue.limit)
        }
        writer.open()
        queue.flush()
        let written = writer.written.withLock { $0 }
        let lines = written.filter { $0.hasPrefix("line ") }
        let notices = written.filter { $0.hasPrefix("dropped ") }
        let droppedCounted = notices.compactMap { Int($0.dropFirst("dropped ".count)) }.reduce(0, +)
        #expect(lines.count + droppedCounted == 1000, "every line is written or counted once: \(written.suffix(3))")
        #expect(droppedCounted == queue.dropped)
        #expect(droppedCounted >= 800, "a 1000-byte queue cannot hold more than about 100 of them")
        #expect(lines == lines.sorted(), "in order")
        #expect(written.last?.hasPrefix("dropped ") == true, "the notice follows the lines queued before the drops")
        // Once the writer keeps up, nothing more is lost.
        for index in 0..<50 { queue.submit("again \(index)", size: 10) }
        queue.flush()
        #expect(queue.dropped == droppedCounted)
        #expect(writer.written.withLock { $0.suffix(50) } == (0..<50).map { "again \($0)" })
    }

    /// The real handler against a journald stand-in that stops reading: the
    /// logging thread goes on, and once the stand-in reads again the
    /// entries arrive in order, then one warning entry counts the rest.
    @Test func aJournalThatStopsReadingNeverBlocksTheLogger() async throws {
        let receiver = try DatagramReceiver.abstract()
        // Its own writer: the shared one serves the other tests' journals.
        let output = JournalLogHandler.makeOutput(limit: JournalLogHandler.queueLimit)
        let logger = Logger(label: "tether.test.stall", factory: { label in
            JournalLogHandler(
                label: label, level: .trace, identifier: "tether-stall", socketPath: receiver.address,
                fallbackDescriptor: STDERR_FILENO, output: output)
        })
        let padding = String(repeating: "x", count: 1000)
        let total = 4000  // about 4 MB of entries: more than the queue holds
        let done = Atomic<Bool>(false)
        let thread = Thread {
            for index in 0..<total { logger.info("entry \(index) \(padding)") }
            done.store(true, ordering: .releasing)
        }
        thread.start()
        #expect(await eventually(timeout: .seconds(30)) { done.load(ordering: .acquiring) },
                "the logging thread finished while nobody read the journal's socket")
        var entries: [Int] = []
        var notices: [Int] = []
        while notices.isEmpty || entries.count + notices.reduce(0, +) < total {
            let entry = try ParsedJournalEntry(try await receiver.next().payload)
            if entry["TETHER_EVENT"] == "log-dropped" {
                #expect(entry["PRIORITY"] == "4")
                notices.append(Int(entry["TETHER_DROPPED"] ?? "") ?? -1)
            } else if let message = entry["MESSAGE"], let number = Int(message.split(separator: " ")[1]) {
                entries.append(number)
            }
        }
        output.flush()
        #expect(entries == entries.sorted())
        #expect(entries.count + notices.reduce(0, +) == total)
        #expect(output.dropped == notices.reduce(0, +))
        print("figure: stalled journal: \(total) entries logged, \(entries.count) delivered, \(notices.reduce(0, +)) dropped in \(notices.count) notice(s)")
    }
}

private func eventually(timeout: Duration, _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let end = clock.now + timeout
    while clock.now < end {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return condition()
}
