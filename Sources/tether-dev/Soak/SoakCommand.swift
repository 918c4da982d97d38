import ArgumentParser
import CommandLineArguments
import Foundation

struct SoakCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "Chaos soak: random faults against the simulator and the daemon; checks that nothing was lost.",
        discussion: """
            Starts a private dbus-daemon, `tether-dev simulate` and `tether run` (as `tether-dev demo` does; \
            the `tether` binary must be in the same directory as tether-dev), then \
            for --duration injects random faults from every simulator knob: link drops with several reasons, \
            failing connects with each classified BlueZ error, InProgress, bluetoothd crashes and graceful \
            restarts, adapter power off/on, connect latency spikes, a hung dongle application (its link \
            dropped within the silence limit), a GATT layout change, a stale device object, the controller \
            renumbered, rfkill soft blocks (cleared by Tether, or held and lifted by the soak), a brief rfkill \
            hard block, a controller lockup cleared by Tether's power-cycle step, a dongle that lost its keys (the \
            simulated dongle needs an encrypted link; Tether pairs Just Works, and pairs again once); kills the daemon with SIGKILL and restarts \
            it a few times; and, when run as root, fills the readings directory (a small tmpfs) for a few \
            seconds. At the end it checks and prints: the dongle never fell asleep; no reading lost or \
            doubled outside the kill windows; RSS growth of the daemon from minute 2 (or a third of its \
            life) to the end under 2 MiB; open descriptors stable; retries within the configured window. \
            Exits 1 on any violation. `make soak DURATION=10m` runs it.
            """
    )

    @Option(help: "How long to inject faults (e.g. 2m, 10m).")
    var duration = DurationArgument(.seconds(600))

    @Option(help: "Notifications per second from the simulated dongle.")
    var notifyRate: Double = 50

    @Option(help: "Seed for the fault schedule (default: random; printed, to replay a run).")
    var seed: UInt64?

    @Option(help: "Inject only these faults (comma-separated names, e.g. rfkill-soft,lockup); default: all.")
    var faults: String?

    @Flag(help: "Keep the temporary directory (logs, readings, event log).")
    var keep = false

    func validate() throws {
        guard duration.duration >= .seconds(30) else { throw ValidationError("--duration must be at least 30s") }
        guard notifyRate > 0, notifyRate <= 2000 else { throw ValidationError("--notify-rate must be in (0, 2000]") }
        for name in faultNames where SoakFault(rawValue: name) == nil {
            throw ValidationError("unknown fault \(name); one of \(SoakFault.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    private var faultNames: [String] {
        (faults ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    func run() async throws {
        let soak = try SoakScript(
            duration: duration.duration, notifyRate: notifyRate, seed: seed ?? UInt64.random(in: 1 ... .max), keepFiles: keep,
            only: Set(faultNames.compactMap(SoakFault.init(rawValue:)))
        )
        let ok = await soak.run()
        if !ok { throw ExitCode.failure }
    }
}
