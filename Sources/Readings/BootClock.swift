import CClock
import DurationUnits
import FoundationEssentials
import Synchronization
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
    /// The system clock was synchronised: the kernel's NTP status said so
    /// (`adjtimex`: not `TIME_ERROR`; systemd-timesyncd, chrony and ntpd all
    /// clear the kernel's unsynchronised flag once they have set the clock),
    /// or, where a sandbox denies adjtimex (systemd's `ProtectClock=`),
    /// systemd-timesyncd's `/run/systemd/timesync/synchronized` exists. Nil:
    /// neither could tell (the record then has no `clock_synced`).
    public var clockSynchronised: Bool?

    public init(bootID: String, sinceBoot: Duration, clockSynchronised: Bool?) {
        self.bootID = bootID
        self.sinceBoot = sinceBoot
        self.clockSynchronised = clockSynchronised
    }

    /// `sinceBoot` in whole milliseconds (a record's `boot_ms`).
    public var sinceBootMilliseconds: Int64 {
        sinceBoot.wholeMilliseconds
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
    /// the process runs), CLOCK_BOOTTIME and the clock's status per reading
    /// (a vDSO call; the status at most once a second or after a step:
    /// ClockStatusCache).
    /// Without a boot id nothing is stamped.
    ///
    /// The boot id is `/proc/sys/kernel/random/boot_id`, or, where the
    /// sandbox hides /proc/sys (the units' `ProcSubset=pid`), the
    /// environment's `TETHER_BOOT_ID`, which the units set to systemd's
    /// `%b` (the same id, without dashes).
    public static func system(
        bootIDPath: String = "/proc/sys/kernel/random/boot_id",
        environment: [String: String]? = nil,
        timesyncFlag: String = "/run/systemd/timesync/synchronized"
    ) -> BootClock {
        // getenv and read(2), not ProcessInfo and FileManager: their first
        // use pulls in pages of Foundation the daemon otherwise never touches
        // (0.7 MiB of RSS in make bench's footprint: 11.1 → 10.4 MiB).
        let fromEnvironment = environment.map { $0["TETHER_BOOT_ID"] } ?? getenv("TETHER_BOOT_ID").map { String(cString: $0) }
        guard let bootID = readBootID(at: bootIDPath) ?? fromEnvironment.flatMap(normalisedBootID) else { return .none }
        // The status is asked again at most once a second of boot time, and
        // at once after a step of the clock (ClockStatusCache says why).
        let cache = Mutex(ClockStatusCache())
        return BootClock {
            let now = sinceBoot()
            let synchronised = cache.withLock {
                $0.status(sinceBoot: now, wall: wallClock()) { clockSynchronised(timesyncFlag: timesyncFlag) }
            }
            return BootStamp(bootID: bootID, sinceBoot: now, clockSynchronised: synchronised)
        }
    }

    /// The boot id in the file.
    static func readBootID(at path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return normalisedBootID(String(decoding: buffer[..<count].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self))
    }

    /// A boot id as the kernel writes it, a UUID's 36 lowercase characters,
    /// from that form or systemd's 32 hex digits; nil for anything else (it
    /// goes into every record as is).
    static func normalisedBootID(_ text: String) -> String? {
        let hex = Array(text.lowercased().utf8.filter { $0 != UInt8(ascii: "-") })
        guard hex.count == 32,
              hex.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }),
              text.utf8.count == 32 || Array(text.utf8).enumerated().allSatisfy({ [8, 13, 18, 23].contains($0.offset) == ($0.element == UInt8(ascii: "-")) })
        else { return nil }
        var uuid = ""
        for (index, byte) in hex.enumerated() {
            if [8, 12, 16, 20].contains(index) { uuid += "-" }
            uuid.unicodeScalars.append(Unicode.Scalar(byte))
        }
        return uuid
    }

    /// CLOCK_BOOTTIME now.
    public static func sinceBoot() -> Duration {
        reading(CLOCK_BOOTTIME)
    }

    /// CLOCK_REALTIME now, since the epoch (a vDSO call).
    static func wallClock() -> Duration {
        reading(CLOCK_REALTIME)
    }

    private static func reading(_ clock: clockid_t) -> Duration {
        var now = timespec()
        clock_gettime(clock, &now)
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }

    /// adjtimex(2) with no modes reads the status: `TIME_ERROR` (5) while
    /// the kernel's `STA_UNSYNC` is set, which no NTP client has cleared.
    public static func clockSynchronised(timesyncFlag: String = "/run/systemd/timesync/synchronized") -> Bool? {
        switch tether_clock_synchronised() {
        case 1: return true
        case 0: return false
        default:
            // adjtimex denied (a sandbox's seccomp filter): timesyncd's flag,
            // which exists once it has synchronised the clock this boot.
            let directory = timesyncFlag.lastIndex(of: "/").map { String(timesyncFlag[..<$0]) } ?? "."
            guard access(directory, F_OK) == 0 else { return nil }
            return access(timesyncFlag, F_OK) == 0
        }
    }
}
