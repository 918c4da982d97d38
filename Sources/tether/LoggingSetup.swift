import ArgumentParser
import Logging
import TetherDaemon

enum LoggingSetup {
    /// swift-log allows one bootstrap per process.
    static func bootstrap(level: Logger.Level) {
        LoggingSystem.bootstrap { label in StderrLogHandler(label: label, level: level) }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
