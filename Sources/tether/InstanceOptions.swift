import ArgumentParser
import Configuration

/// `--instance NAME`: which daemon a command is about, when a gateway runs
/// one per dongle (`tether@NAME.service`, config `/etc/tether/NAME.toml`).
struct InstanceOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The daemon instance (one per dongle, tether@NAME.service); default: the single tether.service.",
            valueName: "name"
        )
    )
    var instance: String?

    func validate() throws {
        _ = try resolved()
    }

    func resolved() throws -> InstanceName {
        guard let instance else { return .default }
        do {
            return try InstanceName(instance)
        } catch {
            throw ValidationError(error.message)
        }
    }
}

/// Exit codes of the client commands, after the LSB's for `status`.
enum ClientExit {
    static let failure: Int32 = 1
    /// The daemon is not running (LSB: "program is not running").
    static let notRunning: Int32 = 3
    /// The bus policy refused (LSB: "user had insufficient privilege").
    static let accessDenied: Int32 = 4
    /// `tether status` only: the daemon owns its bus name but does not
    /// answer (LSB, for status: "program or service status is unknown").
    static let statusUnknown: Int32 = 4
}
