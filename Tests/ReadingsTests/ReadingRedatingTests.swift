import Foundation
@testable import Readings
import Testing

/// The re-dating rule of docs/operations.md ("Dating readings"), on the
/// worked example given there.
struct ReadingRedatingTests {
    static let boot = "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11"

    func record(_ ts: String, seq: UInt64, boot: String = boot, ms: UInt64, synced: Bool) -> ReadingRecord {
        ReadingRecord(ts: ts, seq: seq, device: "AA:BB:CC:DD:EE:FF", char: "c", source: "notify", hex: "00",
                      version: 2, bootID: boot, bootMilliseconds: ms, clockSynchronised: synced)
    }

    /// A Raspberry Pi boots with its clock at the last shutdown (fake-hwclock,
    /// 2026-12-01 08:00:05), records two readings, then NTP sets the clock
    /// (true time 2026-12-06 07:15:40 at 95 s since boot).
    @Test func theWorkedExample() {
        let early1 = record("2026-12-01T08:00:05.000Z", seq: 1, ms: 21_000, synced: false)
        let early2 = record("2026-12-01T08:00:50.500Z", seq: 2, ms: 66_500, synced: false)
        let synced = record("2026-12-06T07:15:40.000Z", seq: 3, ms: 95_000, synced: true)
        let later = record("2026-12-06T07:16:40.000Z", seq: 4, ms: 155_000, synced: true)
        var redating = ReadingRedating()
        for record in [early1, early2, synced, later] { redating.learn(record) }
        // The boot began at 07:15:40.000 − 95 s = 07:14:05.000.
        #expect(redating.redated(early1) == "2026-12-06T07:14:26.000Z")
        #expect(redating.redated(early2) == "2026-12-06T07:15:11.500Z")
        #expect(redating.redated(synced) == nil, "a synchronised ts stands")
        #expect(redating.redated(later) == nil)
        // Another boot's unsynchronised record is not dated by this one.
        let otherBoot = record("1970-01-01T00:00:30.000Z", seq: 5, boot: "11111111-2222-4333-8444-555555555555", ms: 30_000, synced: false)
        #expect(redating.redated(otherBoot) == nil)
        // A version 1 record carries nothing to date it by.
        #expect(redating.redated(ReadingRecord(ts: "1970-01-01T00:00:30.000Z", seq: 6, device: "A", char: "c", source: "notify", hex: "")) == nil)
        #expect(redating.bootsDated == 1)
    }

    /// The earliest synchronised record dates the boot: a later clock step
    /// (someone set it back two hours) does not move the start.
    @Test func theFirstSynchronisedRecordOfABootDatesIt() {
        var redating = ReadingRedating()
        redating.learn(record("2026-12-06T07:15:40.000Z", seq: 1, ms: 95_000, synced: true))
        redating.learn(record("2026-12-06T05:16:40.000Z", seq: 2, ms: 155_000, synced: true))
        #expect(redating.redated(record("2026-12-01T08:00:05.000Z", seq: 3, ms: 21_000, synced: false)) == "2026-12-06T07:14:26.000Z")
    }

    @Test(arguments: ["1970-01-01T00:00:00.000Z", "2000-02-29T23:59:59.999Z", "2026-12-06T07:14:05.000Z", "2100-03-01T00:00:00.001Z", "9999-12-31T23:59:59.999Z"])
    func timestampsRoundTrip(_ text: String) throws {
        let milliseconds = try #require(UTCTimestamp.milliseconds(text))
        #expect(UTCTimestamp.string(milliseconds: milliseconds) == text)
    }

    @Test(arguments: ["2026-12-06 07:14:05.000Z", "2026-13-06T07:14:05.000Z", "2026-12-06T07:14:05.000", "2026-12-06T07:14:05Z", "x"])
    func otherShapesAreNotTimestamps(_ text: String) {
        #expect(UTCTimestamp.milliseconds(text) == nil)
    }
}

/// Where the boot id comes from: the kernel's file, or systemd's `%b` in
/// the environment where a sandbox hides /proc/sys.
struct BootClockTests {
    @Test func systemdsBootIDBecomesTheKernelsForm() {
        #expect(BootClock.normalisedBootID("0d9a3c528f3e4c1b9a513f0c2b7d6e11") == "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11")
        #expect(BootClock.normalisedBootID("0D9A3C52-8F3E-4C1B-9A51-3F0C2B7D6E11") == "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11")
        #expect(BootClock.normalisedBootID("0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e1") == nil)
        #expect(BootClock.normalisedBootID("0d9a3c528-f3e-4c1b-9a51-3f0c2b7d6e11") == nil)
        #expect(BootClock.normalisedBootID("0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e1g") == nil)
        #expect(BootClock.normalisedBootID("\"; rm -rf /") == nil)
    }

    @Test func theEnvironmentStandsInForAHiddenProcSys() throws {
        let clock = BootClock.system(bootIDPath: "/nonexistent/boot_id", environment: ["TETHER_BOOT_ID": "0d9a3c528f3e4c1b9a513f0c2b7d6e11"])
        #expect(clock.now()?.bootID == "0d9a3c52-8f3e-4c1b-9a51-3f0c2b7d6e11")
        #expect(BootClock.system(bootIDPath: "/nonexistent/boot_id", environment: [:]).now() == nil)
        #expect(BootClock.system(bootIDPath: "/nonexistent/boot_id", environment: ["TETHER_BOOT_ID": "%b"]).now() == nil)
        // The kernel's file wins where it can be read.
        let kernel = try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(BootClock.system(environment: ["TETHER_BOOT_ID": "0d9a3c528f3e4c1b9a513f0c2b7d6e11"]).now()?.bootID == kernel)
    }
}

/// A record's `clock_synced` is asked of the kernel at most once a second,
/// but again at once after the clock was stepped (the kernel marks it
/// unsynchronised then).
struct ClockStatusCacheTests {
    final class Asks: @unchecked Sendable {
        var count = 0
        var answer: Bool? = true
    }

    @Test func anAnswerIsKeptForASecondOfBootTime() {
        var cache = ClockStatusCache()
        let asks = Asks()
        let wallAtBoot = Duration.seconds(1_765_000_000)
        func ask(_ at: Duration) -> Bool? {
            cache.status(sinceBoot: at, wall: wallAtBoot + at) { asks.count += 1; return asks.answer }
        }
        #expect(ask(.seconds(10)) == true)
        asks.answer = false
        #expect(ask(.milliseconds(10_500)) == true)
        #expect(asks.count == 1)
        #expect(ask(.milliseconds(11_000)) == false)
        #expect(asks.count == 2)
    }

    @Test func aStepOfTheClockAsksAgainAtOnce() {
        var cache = ClockStatusCache()
        let asks = Asks()
        let wallAtBoot = Duration.seconds(1_765_000_000)
        #expect(cache.status(sinceBoot: .seconds(10), wall: wallAtBoot + .seconds(10)) { asks.count += 1; return true } == true)
        // Set back by 2 hours 100 ms later: the kernel now says unsynchronised.
        let back = cache.status(sinceBoot: .milliseconds(10_100), wall: wallAtBoot + .milliseconds(10_100) - .seconds(7200)) {
            asks.count += 1; return false
        }
        #expect(back == false)
        #expect(asks.count == 2)
        // Forward by 56 years from 1970: asked again too.
        let forward = cache.status(sinceBoot: .milliseconds(10_200), wall: wallAtBoot + .milliseconds(10_200) + .seconds(86_400 * 365 * 56)) {
            asks.count += 1; return true
        }
        #expect(forward == true)
        #expect(asks.count == 3)
        // An NTP client's slew (0.5 ms a second) is not a step.
        let slewed = cache.status(sinceBoot: .milliseconds(10_700), wall: wallAtBoot + .milliseconds(10_700) + .seconds(86_400 * 365 * 56) + .microseconds(250)) {
            asks.count += 1; return false
        }
        #expect(slewed == true)
        #expect(asks.count == 3)
    }
}
