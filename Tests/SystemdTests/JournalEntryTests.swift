import Logging
import Systemd
import TestSupport
import Testing

@Suite struct JournalEntryTests {
    @Test func singleLineValuesUseTheSimpleForm() throws {
        var entry = JournalEntry()
        entry.append(.message, "hello")
        entry.append(.priority, "6")
        #expect(entry.encoded() == Array("MESSAGE=hello\nPRIORITY=6\n".utf8))
    }

    @Test func valuesWithNewlinesUseTheLengthPrefixedForm() throws {
        var entry = JournalEntry()
        entry.append(.message, "a\nbc")
        entry.append(.priority, "3")
        let expected = Array("MESSAGE\n".utf8) + [4, 0, 0, 0, 0, 0, 0, 0] + Array("a\nbc\n".utf8)
            + Array("PRIORITY=3\n".utf8)
        #expect(entry.encoded() == expected)
    }

    @Test func encodingRoundTripsThroughTheParser() throws {
        let name = try #require(JournalFieldName(validating: "TETHER_DUMP"))
        let entry = JournalEntry(fields: [
            JournalField(name: .message, value: "line one\nline two\n"),
            JournalField(name: name, value: [0, 1, 2, 10, 255, 61]),
            JournalField(name: name, value: "=equals=first"),
            JournalField(name: .codeLine, value: ""),
        ])
        let parsed = try ParsedJournalEntry(entry.encoded())
        #expect(parsed.fields.map(\.name) == ["MESSAGE", "TETHER_DUMP", "TETHER_DUMP", "CODE_LINE"])
        #expect(parsed.fields.map(\.value) == entry.fields.map(\.value))
        #expect(parsed.fields.map(\.isBinary) == [true, true, false, false])
    }

    @Test(arguments: [
        (Logger.Level.trace, "7"), (.debug, "7"), (.info, "6"), (.notice, "5"),
        (.warning, "4"), (.error, "3"), (.critical, "2"),
    ])
    func levelsMapToSyslogPriorities(level: Logger.Level, priority: String) {
        let event = LogEvent(
            level: level, message: "m", metadata: nil, source: nil, file: "F.swift", function: "f()", line: 1
        )
        let entry = JournalEntry(event: event, label: "l", identifier: "tether", metadata: [:])
        #expect(entry.value(of: .priority) == priority)
    }

    @Test func logEventBecomesTheDocumentedFields() throws {
        let event = LogEvent(
            level: .notice, message: "connected", metadata: ["ignored": "x"], source: nil,
            file: "TetherDaemon/LinkService.swift", function: "connect(to:)", line: 88
        )
        let entry = JournalEntry(
            event: event, label: "tether.link", identifier: "tether",
            metadata: ["event": "connect", "device-id": "AA:BB", "attempt": "2"]
        )
        #expect(entry.fields.map(\.name.rawValue) == [
            "MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "TETHER_LOGGER",
            "TETHER_ATTEMPT", "TETHER_DEVICE_ID", "TETHER_EVENT",
        ])
        let parsed = try ParsedJournalEntry(entry.encoded())
        #expect(parsed["MESSAGE"] == "connected")
        #expect(parsed["PRIORITY"] == "5")
        #expect(parsed["SYSLOG_IDENTIFIER"] == "tether")
        #expect(parsed["CODE_FILE"] == "TetherDaemon/LinkService.swift")
        #expect(parsed["CODE_LINE"] == "88")
        #expect(parsed["CODE_FUNC"] == "connect(to:)")
        #expect(parsed["TETHER_LOGGER"] == "tether.link")
        #expect(parsed["TETHER_DEVICE_ID"] == "AA:BB")
        #expect(parsed["TETHER_IGNORED"] == nil)
    }

    @Test func errorBesideTheMessageIsKeptUnlessMetadataHasOne() {
        struct Broken: Error, CustomStringConvertible { var description: String { "adapter gone" } }
        let event = LogEvent(
            level: .error, message: "failed", error: Broken(), metadata: nil, source: nil,
            file: "F.swift", function: "f()", line: 1
        )
        let withoutMetadata = JournalEntry(event: event, label: "l", identifier: "t", metadata: [:])
        #expect(withoutMetadata.value(of: JournalFieldName(metadataKey: "error")) == "adapter gone")
        let withMetadata = JournalEntry(event: event, label: "l", identifier: "t", metadata: ["error": "timeout"])
        #expect(withMetadata.fields.filter { $0.name.rawValue == "TETHER_ERROR" }.map(\.value) == [Array("timeout".utf8)])
    }
}
