import EventLoop
@testable import Forwarding
import Foundation
import Logging
import MQTT
import Readings
import TestSupport
import Testing

/// `{device}` in the topic: a device value that no topic may hold (`+`, `#`,
/// NUL, control characters) or that would change the topic's shape (`/`) is
/// escaped to one level; forwarding goes on past it, and loses nothing.
@Suite(.serialized) struct ForwarderTopicTests {
    @Test func addressesAreUnchangedAndEverythingATopicCannotHoldIsEscaped() {
        #expect(Forwarder.topicLevel(device: "AA:BB:CC:DD:EE:FF") == "AA:BB:CC:DD:EE:FF")
        #expect(Forwarder.topicLevel(device: "unknown") == "unknown")
        #expect(Forwarder.topicLevel(device: "Gerät-ü") == "Gerät-ü", "other Unicode is kept")
        #expect(Forwarder.topicLevel(device: "a+b") == "a%2Bb")
        #expect(Forwarder.topicLevel(device: "a#") == "a%23")
        #expect(Forwarder.topicLevel(device: "../other/x") == "..%2Fother%2Fx", "one level, never more")
        #expect(Forwarder.topicLevel(device: "a\u{0}b") == "a%00b")
        #expect(Forwarder.topicLevel(device: "a\u{1B}[2Jb\u{7F}\u{9B}") == "a%1B[2Jb%7F%C2%9B")
        let nonCharacters = String(decoding: [0xEF, 0xBF, 0xBF, 0xEF, 0xB7, 0x90], as: UTF8.self)  // U+FFFF U+FDD0
        #expect(Forwarder.topicLevel(device: Substring(nonCharacters)) == "%EF%BF%BF%EF%B7%90")
        #expect(Forwarder.topicLevel(device: "100%") == "100%25", "% too: two devices never share a topic")
        #expect(Forwarder.topicLevel(device: "a+") != Forwarder.topicLevel(device: "a%2B"))
        let long = Forwarder.topicLevel(device: Substring(String(repeating: "+", count: 1000)))
        #expect(long.utf8.count <= 256 && long.hasPrefix("%2B%2B") && long.utf8.count % 3 == 0, "cut at 256 bytes, between escapes")
        for device in ["a+b", "#", "x/y", "n\u{0}", "\u{1}\u{9F}"] {
            let level = Forwarder.topicLevel(device: Substring(device))
            #expect(!level.contains("+") && !level.contains("#") && !level.contains("/"), "\(level)")
            #expect(!level.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }, "\(level)")
        }
    }

    /// Records of a device named `bad+#/dev` between records of a real
    /// address: every record reaches the broker and the cursor reaches the
    /// last. Before, libmosquitto refused the topic (MOSQ_ERR_INVAL), the
    /// forwarder took that for a lost broker and retried the same record
    /// from the cursor forever: nothing after it was ever forwarded.
    @Test func aDeviceATopicCannotHoldIsForwardedEscapedAndForwardingGoesOn() async throws {
        let directory = try TemporaryDirectory("forward-topic")
        defer { directory.remove() }
        let readings = directory.path + "/readings"
        let log = try ReadingLog(directory: readings, rotateSize: 4 << 20, retainSize: 1 << 30)
        func reading(_ n: UInt32, device: String) -> Reading {
            let bytes = withUnsafeBytes(of: n.littleEndian) { Array($0) } + [0, 0, 0, 0]
            return Reading(device: device, characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: bytes)
        }
        try log.append((1...5).map { reading($0, device: "AA:BB:CC:DD:EE:FF") })
        try log.append((6...10).map { reading($0, device: "bad+#/dev") })
        try log.append((11...15).map { reading($0, device: "AA:BB:CC:DD:EE:FF") })
        log.close()
        let broker = try MosquittoBroker(directory: directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        let subscriber = try MosquittoSubscriber(port: broker.port, topic: "tether/test/#", directory: directory.url)
        defer { subscriber.stop() }
        try await Task.sleep(for: .milliseconds(300))
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        let capture = LogCapture()
        let logger = Logger(label: "tether-forward") { _ in CapturingLogHandler(capture: capture) }
        let forwarder = try await ForwarderTests.RunningForwarder(
            ForwarderBacklogTests.settings(readings: readings, state: directory.path + "/state", port: broker.port, batch: 1),
            logger: logger)
        let caughtUp = await eventually(timeout: .seconds(15)) { forwarder.forwarder.status.acknowledgedSeq == 15 }
        let delivered = await eventually(timeout: .seconds(10)) { Set(ForwarderTests.sequences(subscriber.lines)).count == 15 }
        let status = forwarder.forwarder.status
        await forwarder.stop()
        #expect(caughtUp, "acknowledged seq \(status.acknowledgedSeq), last error \(status.lastError ?? "none"): \(capture.all)")
        #expect(delivered, "\(subscriber.lines)")
        let escaped = subscriber.lines.filter { $0.hasPrefix("tether/test/bad%2B%23%2Fdev/readings ") }
        #expect(escaped.count == 5, "the device's records, on its escaped topic: \(subscriber.lines)")
        #expect(escaped.allSatisfy { $0.contains(#""device":"bad+#/dev""#) }, "the payload is the record as on disk")
        #expect(try ForwardCursor(path: directory.path + "/state/cursor").load() == 15)
        let warnings = capture.all.filter { $0.contains("an MQTT topic level cannot") }
        #expect(warnings.count == 1, "logged once, naming the topic: \(capture.all)")
        #expect(warnings.first?.contains("tether/test/bad%2B%23%2Fdev/readings") == true)
        #expect(try ReadingLog.readRecords(directory: readings).count == 15, "the log is untouched")
    }
}
