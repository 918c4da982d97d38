import ArgumentParser
import CommandLineArguments
import Configuration
import DBus
import DongleScan
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct ScanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Discover nearby dongles and list their address, name and RSSI.",
        discussion: """
            Runs discovery through bluetoothd and lists devices heard advertising that look like a \
            telemetry dongle: the Nordic UART Service UUID, Nordic's company ID 0x0059 in manufacturer \
            data, or a name starting with the config's dongle.name_prefix. Put the address you want in \
            the config as dongle.address. Works while the daemon runs. Exit status: 0 (also when nothing \
            was found), 1 when bluetoothd or the adapter is unavailable (a bluetoothd that holds its name but \
            answers nothing for 10 s is named as hung, with its pid).
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Option(help: "How long to scan.")
    var timeout = DurationArgument(.seconds(10))

    @Option(help: "The adapter to scan with (default: the config's, else the first).")
    var adapter: String?

    @Option(help: "The config file to take the adapter and name prefix from (optional).")
    var config: String?

    func validate() throws {
        guard timeout.duration > .zero else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        let instance = try instanceOptions.resolved()
        // The config is a convenience here: scanning is how one writes it.
        let loaded = try? TetherConfig.load(path: config ?? instance.configPath, instance: instance)
        let bus: Bus
        do {
            bus = try await Bus.system()
        } catch {
            ControlConnection.fail("\(error)", code: ClientExit.failure)
        }
        let scanner = DongleScanner(
            bus: bus, adapterName: adapter ?? loaded?.bluez.adapter, namePrefix: loaded?.dongle.namePrefix
        )
        let start = ContinuousClock.now
        let interactive = isatty(STDERR_FILENO) == 1
        let say: @Sendable (String) -> Void = { line in
            StandardError.emit(((interactive ? "\r\u{1B}[K" : "") + line + "\n"))
        }
        say("scanning with \(adapter ?? loaded?.bluez.adapter ?? "the first adapter") for \(DurationText.format(timeout.duration))…")
        // On a terminal, a countdown line; in a pipe or the journal, only the finds.
        let countdown = interactive ? Task {
            let end = start + timeout.duration
            while !Task.isCancelled, ContinuousClock.now < end {
                let left = Int((ContinuousClock.now.duration(to: end).components.seconds)) + 1
                StandardError.emit("\r\u{1B}[K  \(left)s left…")
                try? await Task.sleep(for: .seconds(1))
            }
        } : nil
        let found: [ScanResult]
        do {
            found = try await scanner.scan(for: timeout.duration) { result in
                let elapsed = DurationText.rounded(start.duration(to: .now))
                say(result.foundLine(after: elapsed))
            }
        } catch {
            countdown?.cancel()
            // bluetoothd's words, printed as safely as a device's name.
            ControlConnection.fail("scan failed: \(TerminalText.escaped("\(error)"))", code: ClientExit.failure)
        }
        countdown?.cancel()
        if interactive { StandardError.emit("\r\u{1B}[K") }
        guard !found.isEmpty else {
            print("no dongle found (is it awake and advertising? a sleeping dongle must be woken first)")
            return
        }
        print(ScanResult.table(found))
    }
}
