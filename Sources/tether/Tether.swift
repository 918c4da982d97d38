import ArgumentParser
import CProcess
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct Tether: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tether",
        abstract: "Keeps a Nordic BLE telemetry dongle awake and connected through BlueZ, and logs its readings.",
        discussion: """
            Tether talks to bluetoothd over D-Bus on the system bus (or DBUS_SYSTEM_BUS_ADDRESS), \
            polls the dongle so it never reaches its idle-sleep deadline, reconnects after every \
            drop within bounded retry windows, and writes every notification to JSON Lines files.

            Watch it:       tether status, journalctl -u tether -f
            Steer it:       tether reconnect --wait
            Deliver it:     tether forward (readings to an MQTT broker)
            Without hardware:  tether-dev demo (from a source build)
            """,
        // packaging/version.sh, through the TetherVersion build plugin: the Debian package's version too.
        version: tetherVersion,
        subcommands: [
            RunCommand.self, StatusCommand.self, ReconnectCommand.self, RebindCommand.self, ScanCommand.self, ReadingsCommand.self,
            CheckConfigCommand.self, ForwardCommand.self, PolkitCheckUnitCommand.self, SerdevRebindCommand.self,
        ]
    )


    /// Debian's kernels back anonymous memory with transparent huge pages
    /// wherever a 2 MiB-aligned stretch of a mapping allows ("always"): on
    /// Debian 12 that gave the daemon one 2 MiB page for a few KiB of use,
    /// RssAnon 3.4 MiB instead of 1.4 (the e2e systemd boot reports
    /// AnonHugePages). A daemon this small gains nothing from huge pages, and
    /// each `tether@` instance would pay the 2 MiB. A kernel without the
    /// setting refuses it (EINVAL), which changes nothing.
    static func declineTransparentHugePages() {
        _ = tether_decline_transparent_huge_pages()
    }

    /// libdispatch (under Swift's concurrency runtime) maps its worker
    /// threads' QoS to nice values down to -4 with setpriority(), which an
    /// unprivileged process may not do, and writes each failure to syslog:
    /// every `tether status` a user ran would leave "Failed to set thread
    /// priority for worker thread" in the system journal. On Linux that is
    /// the only thing libdispatch logs, so its log is off unless the caller
    /// set LIBDISPATCH_LOG (the tests set it to stderr). The units let the
    /// daemons' threads take their priorities (LimitNICE=-4), so under
    /// systemd nothing fails in the first place.
    static func quietLibdispatchPriorityLog() {
        // Before the first worker thread: libdispatch reads it at its first log.
        setenv("LIBDISPATCH_LOG", "NO", 0)
    }
}
