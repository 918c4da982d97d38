import Configuration
import Logging
import Synchronization
import Systemd

/// Pets systemd's watchdog (`WATCHDOG=1`) only while the supervisor loop
/// answers: each tick asks the loop to call back between two events, and
/// the next tick pets only if it did. A wedged loop thus stops the pings and
/// systemd restarts the service after `WatchdogSec=`, while a daemon that is
/// merely waiting (for bluetoothd, or for the bus between two connections)
/// keeps them going. Each tick also refreshes `STATUS=`, so "last reading
/// 3s ago" stays true without a timer of its own.
public struct SupervisorWatchdog: Sendable {
    let notifier: SystemdNotifier
    let logger: Logger
    /// The link being served now; nil while there is none (no bus yet).
    let currentLink: @Sendable () -> (any ControlledLink)?

    public init(notifier: SystemdNotifier, logger: Logger, currentLink: @escaping @Sendable () -> (any ControlledLink)?) {
        self.notifier = notifier
        self.logger = logger
        self.currentLink = currentLink
    }

    /// Runs until cancelled; `interval` is half of systemd's `WATCHDOG_USEC`.
    public func run(every interval: Duration) async {
        var silentSince: ContinuousClock.Instant?
        while !Task.isCancelled {
            let answered = Mutex(false)
            let link = currentLink()
            link?.ping { answered.withLock { $0 = true } }
            do { try await Task.sleep(for: interval) } catch { return }
            if link == nil || answered.withLock({ $0 }) {
                if let since = silentSince {
                    logger.notice("the supervisor loop answers again after \(DurationText.rounded(since.duration(to: .now)))")
                    silentSince = nil
                }
                notifier.watchdog()
                if let status = link?.status { notifier.status(status.summary()) }
            } else if silentSince == nil {
                silentSince = .now
                logger.critical("the supervisor loop did not answer within \(DurationText.rounded(interval)); withholding the watchdog ping")
            }
        }
    }
}
