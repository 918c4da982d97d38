import Foundation
import PayloadLayout
@testable import Readings
import Testing

/// docs/reading.schema.json (installed as /usr/share/tether/reading.schema.json)
/// against the records the log writes, checked by a real JSON Schema
/// validator (Debian's python3-jsonschema, draft 2020-12), and the version
/// rule: every field the schema declares is one the decoder knows.
@Suite struct ReadingSchemaTests {
    static let schema = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/reading.schema.json").path

    /// Validates each line of `lines` with jsonschema; the validator's
    /// complaints, one line each (empty: all valid).
    func validate(_ lines: [String]) throws -> [String] {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let records = URL(fileURLWithPath: dir.path).appendingPathComponent("records.jsonl")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: records)
        let script = """
            import json, sys
            from jsonschema import Draft202012Validator
            schema = json.load(open(sys.argv[1]))
            Draft202012Validator.check_schema(schema)
            validator = Draft202012Validator(schema)
            for number, line in enumerate(open(sys.argv[2]), 1):
                for error in validator.iter_errors(json.loads(line)):
                    print(f"line {number}: {error.message}")
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script, Self.schema, records.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "python3 with jsonschema (apt-get install python3-jsonschema): \(text)")
        return text.split(separator: "\n").map(String.init)
    }

    @Test func everyKindOfRecordTheLogWritesIsValid() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = try ReadingLog(directory: dir.path, rotateSize: 1 << 20, retainSize: 1 << 30)
        let boot = BootStamp(bootID: "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11", sinceBoot: .seconds(12), clockSynchronised: true)
        try log.append([
            Reading(receivedAt: testDate, device: testDevice, characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", payload: [1, 2], boot: boot),
            Reading(receivedAt: testDate, device: testDevice, characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", source: .read, payload: []),
        ])
        try log.appendGap(count: 3, device: testDevice, at: testDate)
        log.close()
        let lines = String(decoding: try dir.contents(of: try dir.logFiles()[0]), as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        #expect(try validate(lines) == [])
        // Version 1 records, as files written before version 2 hold them, are valid too.
        #expect(try validate([#"{"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"AA:BB:CC:DD:EE:FF","char":"6e40","source":"notify","hex":"0a"}"#]) == [])
        // With [decode]'s fields, as tether readings and tether forward print them.
        let layout = try PayloadLayout(fields: [try .parse("a:u8"), try .parse("b:i8*0.5")])
        guard case .decoded(let decoded) = RecordFields.annotate(Array(lines[0].utf8), with: layout) else {
            Issue.record("not decoded: \(lines[0])")
            return
        }
        #expect(try validate([String(decoding: decoded, as: UTF8.self)]) == [])
        #expect(try validate([lines[0].dropLast() + #","fields":[1]}"#]).count == 1, "fields is an object")
    }

    /// The schema is not a rubber stamp: records a consumer could not use fail.
    @Test func theSchemaRefusesWhatNoRecordIs() throws {
        let complaints = try validate([
            #"{"ts":"1970-01-01 00:00:00","seq":1,"device":"A","char":"c","source":"notify","hex":"0a"}"#,
            #"{"ts":"2026-11-21T13:45:12.345Z","seq":0,"device":"A","char":"c","source":"notify","hex":"0a"}"#,
            #"{"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"A","source":"notify","hex":"0a"}"#,
            #"{"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"A","source":"gap","count":2,"hex":"0a"}"#,
            #"{"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"A","char":"c","source":"notify","hex":"0a","v":2,"boot_id":"0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11"}"#,
            #"{"ts":"2026-11-21T13:45:12.345Z","seq":1,"device":"A","char":"c","source":"notify","hex":"0a","v":2,"boot_id":"x","boot_ms":1,"clock_synced":true}"#,
        ])
        let lines = Set(complaints.compactMap { $0.split(separator: ":").first.map(String.init) })
        #expect(lines == Set((1...6).map { "line \($0)" }), "\(complaints)")
    }

    /// Every property the schema declares is decoded by `ReadingRecord`
    /// (added fields reach `tether readings --redate` and the tests), and
    /// every key the formatter writes is declared.
    @Test func theSchemaDeclaresExactlyTheFieldsTheRecordHas() throws {
        let schema = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Self.schema))) as? [String: Any]
        let declared = Set((schema?["properties"] as? [String: Any] ?? [:]).keys)
        var buffer: [UInt8] = []
        RecordFormat.appendReading(
            Reading(receivedAt: testDate, device: testDevice, characteristic: "c", payload: [1],
                    boot: BootStamp(bootID: "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11", sinceBoot: .seconds(1), clockSynchronised: true)),
            seq: 1, to: &buffer)
        RecordFormat.appendGap(count: 1, device: testDevice, at: testDate, seq: 2, to: &buffer)
        let written = try String(decoding: buffer, as: UTF8.self).split(separator: "\n").flatMap { line in
            (try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] ?? [:]).keys
        }
        // Added on output only, never stored: [decode]'s fields (tether
        // readings, tether forward) and --redate's ts_redated.
        let addedOnOutput: Set<String> = ["fields", "ts_redated"]
        #expect(declared.isSuperset(of: addedOnOutput))
        #expect(Set(written) == declared.subtracting(addedOnOutput))
        let decoded = Set(ReadingRecord.CodingKeys.allCases.map(\.stringValue))
        #expect(decoded == declared.subtracting(addedOnOutput))
    }
}
