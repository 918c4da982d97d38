import ArgumentParser
import Configuration
import Logging

/// The options of the long-running commands, `run` and `forward`: which
/// instance, which config file, how much to log.
struct ServiceOptions: ParsableArguments {
    @OptionGroup var instanceOptions: InstanceOptions

    @Option(name: .shortAndLong, help: "The config file (default: /etc/tether/tether.toml, or /etc/tether/NAME.toml with --instance).")
    var config: String?

    @Option(help: "The least severe messages to log.")
    var logLevel: Logger.Level = .info

    /// The config file to read for `instance`.
    func configPath(for instance: InstanceName) -> String {
        config ?? instance.configPath
    }
}
