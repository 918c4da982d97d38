import CClock
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a record carries besides its wall-clock `ts` so that a backend can
/// tell how far that `ts` can be trusted and re-date it: the boot it was
/// taken in, the time since that boot, and whether the system clock was
/// synchronised then.
///
/// Gateways without a real-time clock start at 1970 or at the last
/// shutdown's time and jump when NTP answers. Time since boot does not
/// jump, so within one boot `ts - boot_ms` of any synchronised record is the
/// boot's true start, and every record of that boot is dated by adding its
/// own `boot_ms` (docs/operations.md, "Dating readings").
public struct BootStamp: Sendable, Equatable {
    /// `/proc/sys/kernel/random/boot_id`: a new UUID each boot.
    public var bootID: String
    /// CLOCK_BOOTTIME: since this boot, counting time suspended (a suspended
    /// gateway's wall clock moves on too, so the offset stays the same).
    public var sinceBoot: Duration
    /// The kernel's NTP status said synchronised (`adjtimex`: not
    /// `TIME_ERROR`). systemd-timesyncd, chrony and ntpd all clear the
    /// kernel's unsynchronised flag once they have set the clock; the file
    /// `/run/systemd/timesync/synchronized` would tell timesyncd's alone.
    public var clockSynchronised: Bool

    public init(bootID: String, sinceBoot: Duration, clockSynchronised: Bool) {
        self.bootID = bootID
        self.sinceBoot = sinceBoot
        self.clockSynchronised = clockSynchronised
    }
}

/// Where `BootStamp`s come from: the kernel's clocks for the daemon, a
/// virtual clock for the deterministic simulation and tests.
public struct BootClock: Sendable {
    public var now: @Sendable () -> BootStamp?

    public init(now: @escaping @Sendable () -> BootStamp?) {
        self.now = now
    }

    /// Never stamps (records then carry `ts` alone, as version 1 did).
    public static let none = BootClock { nil }

    /// The running kernel's: the boot id read once (it cannot change while
    /// the process runs), CLOCK_BOOTTIME and adjtimex per reading (two
    /// vDSO-or-cheap system calls, well under a microsecond). Without a
    /// readable boot id nothing is stamped.
    public static func system(bootIDPath: String = "/proc/sys/kernel/random/boot_id") -> BootClock {
        guard let bootID = readBootID(at: bootIDPath) else { return .none }
        return BootClock {
            BootStamp(bootID: bootID, sinceBoot: sinceBoot(), clockSynchronised: clockSynchronised())
        }
    }

    /// The boot id in the file, checked to be a UUID's 36 characters (it is
    /// written into every record as is).
    static func readBootID(at path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let text = String(decoding: data.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        guard text.utf8.count == 36,
              text.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) })
        else { return nil }
        return text
    }

    static func sinceBoot() -> Duration {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }

    /// adjtimex(2) with no modes reads the status: `TIME_ERROR` (5) while
    /// the kernel's `STA_UNSYNC` is set, which no NTP client has cleared.
    static func clockSynchronised() -> Bool {
        tether_clock_synchronised() == 1
    }
}
