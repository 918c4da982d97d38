import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension SystemdNotifier {
    /// The watchdog timeout systemd set for this process (`WatchdogSec=`),
    /// or nil when there is none. This is the full timeout: ping at half of
    /// it, as sd_watchdog_enabled(3) advises, so one late tick is not fatal.
    ///
    /// WATCHDOG_PID, when present, names the process the timeout is for: a
    /// child that inherited the environment (a shell, a helper) must not
    /// think it owes pings. A value that does not parse disables the
    /// watchdog rather than guessing, as libsystemd does.
    public static func watchdogInterval(
        environment: [String: String] = ProcessEnvironment.current(),
        pid: Int32 = getpid()
    ) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text),
              microseconds > 0, microseconds != UInt64.max  // systemd's "infinity"
        else { return nil }
        if let owner = environment["WATCHDOG_PID"] {
            guard let ownerPID = Int32(owner), ownerPID > 0, ownerPID == pid else { return nil }
        }
        return .microseconds(microseconds)
    }
}
