import ArgumentParser
import Foundation

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "See Tether work without hardware: a private bus, a simulated bluetoothd, the daemon, and faults.",
        discussion: """
            Starts a private dbus-daemon, `tether-dev simulate` (a dongle that falls asleep after 6 s \
            without a GATT write) and `tether run` with a temporary config and readings directory; the \
            `tether` binary must be in the same directory as tether-dev (as `swift build` leaves them). It prints the \
            daemon's state changes and the readings as they arrive, then injects a link drop, a burst of \
            failing connects, a bluetoothd crash, a dongle application that hangs, and an rfkill soft \
            block (the simulator's rfkill, which Tether clears with its rfkill-unblock step), shows Tether recovering from each, checks that every \
            notification the dongle sent is on disk exactly once, and exits 0 (within about 40 s) after \
            stopping everything it started.
            """
    )

    @Flag(help: "Keep everything running after the script until Ctrl-C.")
    var forever = false

    @Flag(help: "Keep the temporary directory (config, readings, logs) instead of removing it.")
    var keep = false

    func run() async throws {
        let demo = try DemoScript(keepFiles: keep || forever)
        let ok = await demo.run(forever: forever)
        if !ok { throw ExitCode.failure }
    }
}
