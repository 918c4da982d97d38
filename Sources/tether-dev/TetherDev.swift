import ArgumentParser
import CommandLineArguments
import TetherDaemon

/// The entry point: as `tether`'s (`CommandMain`), but the commands' tasks
/// run on the global executor, as development tools may.
@main
enum TetherDevMain {
    static func main() {
        CommandMain.run(TetherDev.self, loopName: "tether-dev", preferring: globalConcurrentExecutor) { command in
            // They wait for SIGTERM or SIGINT on a signalfd (the demo only at
            // its end, with --forever: until then Ctrl-C ends it at once).
            if command is SimulateCommand || (command as? DemoCommand)?.forever == true { TerminationSignal.takeOver() }
        }
    }
}

struct TetherDev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tether-dev",
        abstract: "Development tools for Tether: a simulated bluetoothd, the demo, the chaos soak and the bus attacks of make e2e.",
        discussion: """
            Not part of what a gateway runs: the product binary is `tether`. The demo and the soak \
            start `tether-dev simulate` (this binary) and `tether run` (the `tether` binary in the \
            same directory as this one, e.g. both in .build/debug after `swift build`).

            Without hardware:  tether-dev demo
            """,
        version: "0.1.0",
        subcommands: [SimulateCommand.self, DemoCommand.self, SoakCommand.self, AttackCommand.self]
    )
}
