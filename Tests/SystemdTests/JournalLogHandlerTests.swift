import Foundation
import Logging
import Systemd
import TestSupport
import Testing

/// Serialized: the handlers share one sending queue, and `flush()` blocks
/// its caller's thread until that queue has sent everything. Run side by
/// side, two tests blocked in `flush()` held both threads of a 2-core
/// machine's pool while the queue waited for `entriesKeepTheirOrder`'s
/// receiver (full at 10 datagrams) to be read by a task that then had no
/// thread to run on: `swift test` hung for good.
@Suite(.serialized) struct JournalLogHandlerTests {
    private func logger(to receiverAddress: String, fallback: Int32 = STDERR_FILENO) -> Logger {
        Logger(label: "tether.test.journal", factory: { label in
            JournalLogHandler(
                label: label, level: .trace, identifier: "tether-test", socketPath: receiverAddress,
                fallbackDescriptor: fallback
            )
        })
    }

    @Test(arguments: [false, true])
    func entryArrivesWithStructuredFields(abstract: Bool) async throws {
        let directory = try TemporaryDirectory("tether-journal")
        defer { directory.remove() }
        let receiver = abstract
            ? try DatagramReceiver.abstract()
            : try DatagramReceiver(address: directory.path + "/journal.socket")
        var logger = logger(to: receiver.address)
        logger[metadataKey: "device-id"] = "AA:BB:CC:DD:EE:FF"

        let line = #line + 1
        logger.warning("link lost", metadata: ["event": "disconnect", "device": "sensor-1", "attempt": "3"])
        JournalLogHandler.flush()

        let datagram = try await receiver.next()
        #expect(datagram.passedFile == nil)
        let entry = try ParsedJournalEntry(datagram.payload)
        #expect(entry["MESSAGE"] == "link lost")
        #expect(entry["PRIORITY"] == "4")
        #expect(entry["SYSLOG_IDENTIFIER"] == "tether-test")
        #expect(entry["TETHER_LOGGER"] == "tether.test.journal")
        #expect(entry["CODE_FILE"]?.hasSuffix("JournalLogHandlerTests.swift") == true)
        #expect(entry["CODE_LINE"] == String(line))
        #expect(entry["CODE_FUNC"]?.hasPrefix("entryArrivesWithStructuredFields") == true)
        #expect(entry["TETHER_EVENT"] == "disconnect")
        #expect(entry["TETHER_DEVICE"] == "sensor-1")
        #expect(entry["TETHER_ATTEMPT"] == "3")
        #expect(entry["TETHER_DEVICE_ID"] == "AA:BB:CC:DD:EE:FF")
        #expect(entry.fields.allSatisfy { JournalFieldName(validating: $0.name) != nil })
        #expect(entry.fields.allSatisfy { !$0.isBinary })
    }

    @Test func entriesKeepTheirOrder() async throws {
        let receiver = try DatagramReceiver.abstract()
        let logger = logger(to: receiver.address)
        // More entries than a receive queue holds by default (10): the
        // handler's queue waits for room while the test reads, never drops.
        for index in 0..<25 {
            logger.info("entry \(index)")
        }
        var messages: [String?] = []
        for _ in 0..<25 {
            messages.append(try ParsedJournalEntry(try await receiver.next().payload)["MESSAGE"])
        }
        JournalLogHandler.flush()
        #expect(messages == (0..<25).map { "entry \($0)" })
        #expect(try receiver.receive() == nil)
    }

    @Test func multiLineMessageUsesTheBinaryFormAndRoundTrips() async throws {
        let receiver = try DatagramReceiver.abstract()
        let message = "BlueZ said:\norg.bluez.Error.Failed\n  le-connection-abort-by-local\n"
        logger(to: receiver.address).error("\(message)", metadata: ["state": "connecting\nretrying"])
        JournalLogHandler.flush()

        let entry = try ParsedJournalEntry(try await receiver.next().payload)
        let field = try #require(entry.field("MESSAGE"))
        #expect(field.isBinary)
        #expect(field.text == message)
        #expect(entry.field("TETHER_STATE")?.isBinary == true)
        #expect(entry["TETHER_STATE"] == "connecting\nretrying")
        #expect(entry.field("PRIORITY") == .init(name: "PRIORITY", value: Array("3".utf8), isBinary: false))
    }

    @Test func messageTooLargeForADatagramGoesThroughASealedMemfd() async throws {
        let receiver = try DatagramReceiver.abstract()
        let message = (0..<30_000).map { "line \($0)" }.joined(separator: "\n")
        #expect(message.utf8.count > 300_000)
        logger(to: receiver.address).info("\(message)", metadata: ["event": "dump"])
        JournalLogHandler.flush()

        let datagram = try await receiver.next()
        #expect(datagram.payload.isEmpty)
        let file = try #require(datagram.passedFile)
        let seals = try #require(datagram.passedFileSeals)
        for seal in [MemfdSeal.shrink, MemfdSeal.grow, MemfdSeal.write] {
            #expect(seals & seal == seal)
        }
        let entry = try ParsedJournalEntry(file)
        #expect(entry["MESSAGE"] == message)
        #expect(entry["TETHER_EVENT"] == "dump")
        #expect(entry["PRIORITY"] == "6")
    }

    @Test(arguments: ["missing.socket", "regular-file"])
    func unreachableJournalFallsBackToAPlainLine(target: String) async throws {
        let directory = try TemporaryDirectory("tether-journal")
        defer { directory.remove() }
        let socketPath = directory.path + "/" + target
        if target == "regular-file" {
            #expect(FileManager.default.createFile(atPath: socketPath, contents: Data()))
        }
        let fallbackPath = directory.path + "/fallback.log"
        let fallback = open(fallbackPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fallback >= 0)
        defer { close(fallback) }

        let logger = logger(to: socketPath, fallback: fallback)
        logger.error("journal gone", metadata: ["event": "probe", "device": "sensor-1"])
        logger.info("still logging")
        JournalLogHandler.flush()

        let written = try String(contentsOfFile: fallbackPath, encoding: .utf8)
        #expect(written == "tether-test: ERROR journal gone device=sensor-1 event=probe\ntether-test: INFO still logging\n")
    }

    @Test func aPlainLineStaysOneLineWhateverAPeerPutsInTheMessage() async throws {
        // bluetoothd's UnknownObject comes with libdbus's text, which ends in
        // a newline: it split a line of `make e2e`'s log in two.
        let directory = try TemporaryDirectory("tether-journal")
        defer { directory.remove() }
        let fallbackPath = directory.path + "/fallback.log"
        let fallback = open(fallbackPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fallback >= 0)
        defer { close(fallback) }
        let logger = logger(to: directory.path + "/missing.socket", fallback: fallback)

        let error = "org.freedesktop.DBus.Error.UnknownObject: Method \"Connect\" doesn't exist\n"
        logger.warning("attempt 1 failed: \(error)", metadata: ["error": "\(error)", "peer": "a\rb\u{1b}[2Jc"])
        logger.notice("forged?\ntether-test: ERROR event=fake")
        JournalLogHandler.flush()

        let written = try String(contentsOfFile: fallbackPath, encoding: .utf8)
        #expect(written == """
            tether-test: WARNING attempt 1 failed: org.freedesktop.DBus.Error.UnknownObject: Method "Connect" doesn't exist \
            error=org.freedesktop.DBus.Error.UnknownObject: Method "Connect" doesn't exist peer=a\\rb\\u{1b}[2Jc
            tether-test: NOTICE forged?\\ntether-test: ERROR event=fake

            """)
        #expect(PlainLogLine.escaped("tab\there\u{7f}\u{85} end \t\n") == "tab\\there\\u{7f}\\u{85} end")
        #expect(PlainLogLine.escaped("plain") == "plain")
    }

    @Test func fallbackIsPerEntrySoTheJournalIsUsedAgainWhenItReturns() async throws {
        let directory = try TemporaryDirectory("tether-journal")
        defer { directory.remove() }
        let socketPath = directory.path + "/journal.socket"
        let fallbackPath = directory.path + "/fallback.log"
        let fallback = open(fallbackPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fallback >= 0)
        defer { close(fallback) }
        let logger = logger(to: socketPath, fallback: fallback)

        logger.notice("before journald")
        JournalLogHandler.flush()
        let receiver = try DatagramReceiver(address: socketPath)
        logger.notice("after journald")
        JournalLogHandler.flush()

        #expect(try String(contentsOfFile: fallbackPath, encoding: .utf8) == "tether-test: NOTICE before journald\n")
        #expect(try ParsedJournalEntry(try await receiver.next().payload)["MESSAGE"] == "after journald")
    }

    @Test func logLevelAndMetadataAreValueSemantics() {
        var first = JournalLogHandler(label: "a", level: .debug, socketPath: "@unused")
        first[metadataKey: "device"] = "one"
        var second = first
        second.logLevel = .error
        second[metadataKey: "device"] = "two"
        #expect(first.logLevel == .debug)
        #expect(first[metadataKey: "device"] == "one")
        #expect(second[metadataKey: "device"] == "two")
    }
}
