import ArgumentParser

@main
struct TetherDev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tether-dev",
        abstract: "Development tools for Tether: a simulated bluetoothd, the demo and the chaos soak.",
        discussion: """
            Not part of what a gateway runs: the product binary is `tether`. The demo and the soak \
            start `tether-dev simulate` (this binary) and `tether run` (the `tether` binary in the \
            same directory as this one, e.g. both in .build/debug after `swift build`).

            Without hardware:  tether-dev demo
            """,
        version: "0.1.0",
        subcommands: [SimulateCommand.self, DemoCommand.self, SoakCommand.self]
    )
}
