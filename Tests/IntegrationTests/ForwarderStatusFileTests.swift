import Forwarding
import Foundation
import Readings
import TestSupport
import Testing

/// The forwarder's status file dates its connection on the boot's clock
/// too, so that `tether status` says how long it has been connected
/// whatever the wall clock did since (a board that booted at 1970 and
/// then heard NTP).
struct ForwarderStatusFileTests {
    static func contents(since: Date, sinceBootMs: Int64?, bootId: String?) -> ForwarderStatusFile.Contents {
        .init(pid: 1, running: true, broker: "127.0.0.1:1883", readingsDirectory: "/var/lib/tether/readings", connected: true,
              since: since, sinceBootMs: sinceBootMs, bootId: bootId, lastError: nil, gapRecords: 0)
    }

    @Test func theAgeComesFromTheBootClockWhenTheFileIsOfThisBoot() {
        // Connected at boot + 1 s, when the wall clock read 1970; NTP then
        // set it to 2026; status asks at boot + 61 s.
        let file = Self.contents(since: Date(timeIntervalSince1970: 1), sinceBootMs: 1000, bootId: "b1")
        let now = Date(timeIntervalSince1970: 1_796_000_000)
        let thisBoot = BootStamp(bootID: "b1", sinceBoot: .seconds(61), clockSynchronised: true)
        #expect(ForwarderStatusFile.age(of: file, now: now, boot: thisBoot) == 60)
        // Another boot's file (or no boot id here): only the wall clock can say.
        let otherBoot = BootStamp(bootID: "b2", sinceBoot: .seconds(61), clockSynchronised: true)
        #expect(ForwarderStatusFile.age(of: file, now: now, boot: otherBoot) == now.timeIntervalSince1970 - 1)
        #expect(ForwarderStatusFile.age(of: file, now: now, boot: nil) == now.timeIntervalSince1970 - 1)
        // A file of an older version, without the boot's fields.
        let old = Self.contents(since: Date(timeIntervalSince1970: 1_795_999_990), sinceBootMs: nil, bootId: nil)
        #expect(ForwarderStatusFile.age(of: old, now: now, boot: thisBoot) == 10)
    }

    @Test func theBootFieldsAreWrittenAndAnOlderFileWithoutThemIsRead() throws {
        let directory = try TemporaryDirectory("forward-status")
        defer { directory.remove() }
        let file = ForwarderStatusFile(path: directory.path + "/status.json")
        let written = Self.contents(since: Date(timeIntervalSince1970: 1_796_000_000), sinceBootMs: 1234, bootId: "b1")
        try file.write(written)
        let text = try String(contentsOfFile: file.path, encoding: .utf8)
        #expect(text.contains(#""since_boot_ms":1234"#) && text.contains(#""boot_id":"b1""#), "\(text)")
        #expect(try file.read() == written)
        try #"{"pid":1,"running":true,"broker":"b:1","readings_directory":"/r","connected":false,"since":"2026-12-06T10:00:00Z","gap_records":0}"#
            .write(toFile: file.path, atomically: true, encoding: .utf8)
        let old = try #require(try file.read())
        #expect(old.sinceBootMs == nil && old.bootId == nil)
    }
}
