import ArgumentParser
import Logging
import Systemd
import TetherDaemon

enum LoggingSetup {
    /// journald's native protocol when the daemon runs under systemd (its
    /// fields make `journalctl TETHER_EVENT=disconnected` work), plain lines
    /// on stderr otherwise. swift-log allows one bootstrap per process.
    static func bootstrap(level: Logger.Level, environment: [String: String]) {
        if JournalDetection.shouldUseJournal(environment: environment) {
            LoggingSystem.bootstrap { label in JournalLogHandler(label: label, level: level) }
        } else {
            LoggingSystem.bootstrap { label in StderrLogHandler(label: label, level: level) }
        }
    }

    /// Waits until every message logged so far is out (before exiting).
    static func flush() {
        JournalLogHandler.flush()
        StderrLogHandler.flush()
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
