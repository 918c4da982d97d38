import Configuration
import ControlAPI
import EventLoop
import Logging
import Synchronization
import Systemd

/// Pets systemd's watchdog (`WATCHDOG=1`) only while the service's loop
/// answers: each tick asks the loop to call back between two events, and
/// the next tick pets only if it did. A wedged loop thus stops the pings and
/// systemd restarts the service after `WatchdogSec=`, while a daemon that is
/// merely waiting (for bluetoothd, or for the bus between two connections)
/// keeps them going. For the daemon, each tick also refreshes `STATUS=`, so
/// "last reading 3s ago" stays true without a timer of its own. The
/// forwarder (`tether forward`) uses it for its own loop, without `STATUS=`.
public struct SupervisorWatchdog: Sendable {
    let notifier: SystemdNotifier
    let logger: Logger
    /// Asks the loop to call back; false when there is no loop to ask yet
    /// (the daemon without a bus): the process itself then counts as alive.
    let ping: @Sendable (_ reply: @escaping @Sendable () -> Void) -> Bool
    /// The `STATUS=` line to refresh with each ping, if any.
    let statusLine: @Sendable () -> String?
    /// What the log calls the loop.
    let loopName: String

    /// For the daemon: `currentLink` is the link being served now, nil while
    /// there is none (no bus yet).
    public init(notifier: SystemdNotifier, logger: Logger, currentLink: @escaping @Sendable () -> (any ControlledLink)?) {
        self.notifier = notifier
        self.logger = logger
        ping = { reply in
            guard let link = currentLink() else { return false }
            link.ping(reply)
            return true
        }
        statusLine = { currentLink()?.status.summary() }
        loopName = "the supervisor loop"
    }

    /// For a process whose work all runs on `loop`.
    public init(notifier: SystemdNotifier, logger: Logger, loop: EventLoop, loopName: String) {
        self.notifier = notifier
        self.logger = logger
        self.loopName = loopName
        ping = { reply in
            loop.execute(reply)
            return true
        }
        statusLine = { nil }
    }

    /// Runs until cancelled, sleeping on `clock` (the daemon's: an event
    /// loop's timers). `timeout` is systemd's whole watchdog timeout
    /// (`SystemdNotifier.watchdogInterval`, from `WATCHDOG_USEC`); it pets at
    /// half of it, as sd_watchdog_enabled(3) advises, so that one late tick
    /// is not fatal. (Petting once per timeout races systemd's kill at every
    /// tick: `tether forward` once did, and lost the race a minute in.)
    public func run<C: Clock>(timeout: Duration, on clock: C) async where C.Duration == Duration {
        let interval = timeout / 2
        var silentSince: ContinuousClock.Instant?
        while !Task.isCancelled {
            let answered = Mutex(false)
            let asked = ping { answered.withLock { $0 = true } }
            do { try await clock.sleep(for: interval) } catch { return }
            if !asked || answered.withLock({ $0 }) {
                if let since = silentSince {
                    logger.notice("\(loopName) answers again after \(DurationText.rounded(since.duration(to: .now)))")
                    silentSince = nil
                }
                notifier.watchdog()
                if let status = statusLine() { notifier.status(status) }
            } else if silentSince == nil {
                silentSince = .now
                logger.critical("\(loopName) did not answer within \(DurationText.rounded(interval)); withholding the watchdog ping")
            }
        }
    }
}
