import ArgumentParser
import Foundation
import Logging
import TetherCore
import TetherDaemon

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the daemon in the foreground (logs to stderr).",
        discussion: """
            Exits 0 after SIGTERM or SIGINT once every reading is on disk, 74 if some could not \
            be written, 78 on a bad config, 73 if the readings directory cannot be used. The bus is the system bus, or \
            DBUS_SYSTEM_BUS_ADDRESS when set. Every config key is described in README.md; config/tether.toml in \
            the source tree is an annotated example.
            """
    )

    @Option(name: .shortAndLong, help: "The config file.")
    var config: String = TetherConfig.defaultPath

    @Option(help: "The least severe messages to log.")
    var logLevel: Logger.Level = .info

    func run() async throws {
        LoggingSetup.bootstrap(level: logLevel)
        let logger = Logger(label: "tether")
        let loaded: TetherConfig
        do {
            loaded = try TetherConfig.load(path: config)
        } catch {
            logger.critical("\(error)")
            StderrLogHandler.flush()
            throw ExitCode(DaemonRunner.Exit.config)
        }
        let code = await DaemonRunner.run(config: loaded, busAddress: nil, logger: logger)
        StderrLogHandler.flush()
        if code != 0 { throw ExitCode(code) }
    }
}

struct CheckConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a config file: exit 0 if it is good, 78 (EX_CONFIG) with the reason if not."
    )

    @Argument(help: "The config file.")
    var path: String = TetherConfig.defaultPath

    func run() throws {
        do {
            let config = try TetherConfig.load(path: path)
            let dongle = config.dongle.address ?? [config.dongle.namePrefix.map { "name \($0)*" }, config.dongle.serviceUUID.map { "service \($0)" }].compactMap { $0 }.joined(separator: ", ")
            print("\(path): OK (dongle \(dongle), keep-alive every \(DurationText.format(config.keepalive.interval)), readings in \(config.readings.directory))")
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode(DaemonRunner.Exit.config)
        }
    }
}
