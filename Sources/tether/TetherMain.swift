import ArgumentParser
import CommandLineArguments
import TetherDaemon

/// The entry point. The command runs as the root task on an event loop of
/// its own (`CommandMain`), not in an `async main`, so `tether run` never
/// starts a libdispatch worker thread: once one has run, libdispatch wakes
/// the process every second for good (its pool monitor), and an idle
/// daemon must sleep.
@main
enum TetherMain {
    static func main() {
        Tether.quietLibdispatchPriorityLog()
        Tether.declineTransparentHugePages()
        CommandMain.run(Tether.self, loopName: "tether-main") { command in
            // The daemons read SIGTERM, SIGINT and SIGHUP from a signalfd,
            // which needs them blocked in every thread.
            if command is RunCommand || command is ForwardCommand { TerminationSignal.takeOver() }
        }
    }
}
