import ArgumentParser
import Configuration
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import Rfkill
import Systemd
import TetherDaemon

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the daemon in the foreground (what tether.service starts).",
        discussion: """
            Under systemd (Type=notify) it sends READY=1 once it is on the bus with its config read, \
            STATUS= on every state change, WATCHDOG=1 while its supervisor loop answers, and logs to \
            journald with TETHER_* fields; elsewhere it logs plain lines to stderr. It owns \
            io.tether.Tether (io.tether.Tether.NAME with --instance) on the system bus, or on \
            DBUS_SYSTEM_BUS_ADDRESS when set. Exit status: 0 after SIGTERM or SIGINT once every reading \
            is on disk; 69 if another daemon owns the instance's bus name; 73 if the readings directory \
            cannot be used; 74 if readings could not be written; 77 if the D-Bus policy forbids the name; \
            78 on a bad config; 71 if the system gives it no signalfd to read SIGTERM from. rfkill blocks are read from /dev/rfkill and names from /sys/class/rfkill, \
            or, as development seams (the simulator's rfkill, `tether-dev simulate --rfkill`), from \
            TETHER_RFKILL_DEVICE and TETHER_RFKILL_SYSFS when set. Notifications reach it as D-Bus signals (dongle.notify_path = \
            "start-notify", the default) or through a socket bluetoothd hands it ("acquire-notify", \
            or "auto": the socket where bluetoothd offers it); the log says when a socket is used. With \
            [metrics] textfile = "/var/lib/prometheus/node-exporter/tether.prom" it writes Prometheus \
            metrics there for node_exporter's textfile collector, every metrics.interval (15 s) and at \
            stop. Every config key is described in tether.toml(5).
            """
    )

    @OptionGroup var options: ServiceOptions

    func run() async throws {
        let instance = try options.instanceOptions.resolved()
        let environment = ProcessEnvironment.current()
        LoggingSetup.bootstrap(level: options.logLevel, environment: environment)
        let logger = Logger(label: "tether")
        let path = options.configPath(for: instance)
        let loaded: TetherConfig
        let passkey: Passkey?
        do {
            loaded = try TetherConfig.load(path: path, instance: instance)
            // The one command that reads the passkey: the service's own file
            // (owner, mode 0600) or its systemd credential.
            passkey = try loaded.loadPasskey(euid: geteuid(), environment: environment)
        } catch {
            logger.critical("\(error)")
            LoggingSetup.flush()
            throw ExitCode(DaemonRunner.Exit.config)
        }
        for warning in loaded.warnings {
            logger.warning("\(warning)", metadata: ["event": "config-warning"])
        }
        if let refusal = loaded.mqtt?.cleartextPasswordRefusal {
            logger.warning("\(refusal); tether forward refuses to start with it", metadata: ["event": "config-warning"])
        }
        let code = await DaemonRunner.run(
            config: loaded, instance: instance, busAddress: nil, logger: logger,
            notifier: SystemdNotifier(environment: environment),
            watchdog: SystemdNotifier.watchdogInterval(environment: environment, pid: getpid()),
            rfkill: Self.rfkillSource(environment: environment), passkey: passkey
        )
        LoggingSetup.flush()
        if code != 0 { throw ExitCode(code) }
    }
}

extension RunCommand {
    /// `/dev/rfkill` and `/sys/class/rfkill`, unless the environment points
    /// elsewhere: a development seam, like DBUS_SYSTEM_BUS_ADDRESS (the demo
    /// and the soak point the daemon at the simulator's rfkill).
    static func rfkillSource(environment: [String: String]) -> RfkillSource {
        var source = RfkillSource()
        if let device = environment["TETHER_RFKILL_DEVICE"], !device.isEmpty { source.device = device }
        if let sysfs = environment["TETHER_RFKILL_SYSFS"], !sysfs.isEmpty { source.sysfs = sysfs }
        return source
    }
}

struct CheckConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a config file: exit 0 if it is good, 78 (EX_CONFIG) with the reason if not.",
        discussion: """
            Settings that are valid but likely to misbehave (such as dongle.silence_limit = "off", or a \
            limit shorter than two keep-alive intervals, or a reconnect.escalate step that cannot \
            reach this machine's controller, such as usb-reset for the Raspberry Pi's onboard UART \
            radio) are printed as "warning:" lines on stderr; the exit status is still 0. With dongle.pairing = "passkey-file" it checks that the \
            service's user (tether when run as root, else the caller) may use dongle.passkey_file: \
            its owner and mode (0600), never its contents, which only tether run reads.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Argument(help: "The config file (default: the instance's, /etc/tether/tether.toml).")
    var path: String?

    func run() throws {
        let instance = try instanceOptions.resolved()
        let path = path ?? instance.configPath
        do {
            let config = try TetherConfig.load(path: path, instance: instance)
            let dongle = config.dongle.address ?? [config.dongle.namePrefix.map { "name \($0)*" }, config.dongle.serviceUUID.map { "service \($0)" }].compactMap { $0 }.joined(separator: ", ")
            let silence = config.silenceLimit.map { "silence limit \(DurationText.format($0))" } ?? "silence limit off"
            // The steps that cannot reach this gateway's controller (a USB
            // reset of the Raspberry Pi's onboard UART radio).
            for warning in config.warnings.map(\.description) + ControllerIdentity.escalationWarnings(for: config) {
                StandardError.emit("warning: \(warning)\n")
            }
            // tether run only warns of it; tether forward refuses it.
            if let refusal = config.mqtt?.cleartextPasswordRefusal { throw refusal }
            // The passkey file's owner and mode, never its contents: only
            // tether run reads the secret.
            let passkey = try config.checkPasskeyFile(service: .current())
            let pairing = switch config.dongle.pairing {
            case .never: ""
            case .justWorks: ", pairs Just Works"
            case .passkey: ", pairs with the passkey in \(passkey ?? "-")"
            }
            print("\(path): OK (dongle \(dongle)\(pairing), keep-alive every \(DurationText.format(config.keepalive.interval)), \(silence), readings in \(config.readings.directory))")
        } catch {
            StandardError.emit("\(error)\n")
            throw ExitCode(DaemonRunner.Exit.config)
        }
    }
}
