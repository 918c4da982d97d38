import ArgumentParser
import Configuration
import EventLoop
import Forwarding
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import MetricsTextfile
import Systemd
import TetherDaemon

struct ForwardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forward",
        abstract: "Deliver the readings to an MQTT broker, at least once, from the log on disk (tether-forward.service).",
        discussion: """
            Reads the instance's readings directory and publishes every record (the JSON line as on \
            disk; with mqtt.batch = N, up to N lines per message) to the broker of the config's [mqtt] \
            table. The last seq the broker acknowledged is kept, fsynced, in STATE_DIRECTORY (or \
            --state-directory); on start and after every broker loss it goes on from there, so what was \
            in flight may be sent twice, never lost: consumers drop duplicates by seq. A retained status \
            topic says online, and the last will offline. Its state (connected or not, the last error, \
            gaps) is kept in status.json beside the cursor, for tether status. A broker that is away, \
            refuses the credentials or fails the TLS handshake is retried with backoff (1 s doubling to \
            60 s), logged at most once a minute and, for the last two, as an error naming the settings to \
            check. A readings directory that does not exist yet is waited for. It never touches \
            Bluetooth. With [metrics] forward_textfile = "…/tether-forward.prom" it writes Prometheus \
            metrics (broker connected, records published and acknowledged, backlog, gaps) for \
            node_exporter's textfile collector. Exit status: 0 after SIGTERM or SIGINT; 78 on a bad config, an unreadable \
            password, cursor, CA, certificate or key file, or a password file others may read (each named); 73 when the state directory is missing and \
            cannot be created, or is not a writable directory (named); 71 if the system gives it no \
            signalfd to read SIGTERM from.
            """
    )

    @OptionGroup var options: ServiceOptions

    @Option(help: "Where the cursor is kept (default: $STATE_DIRECTORY, else /var/lib/tether-forward); created, mode 0700, if it is missing and its parent is writable.")
    var stateDirectory: String?

    func run() async throws {
        let instance = try options.instanceOptions.resolved()
        let environment = ProcessEnvironment.current()
        LoggingSetup.bootstrap(level: options.logLevel, environment: environment)
        let logger = Logger(label: "tether-forward")
        let path = options.configPath(for: instance)
        let settings: Forwarder.Settings
        let metricsSettings: MetricsSection
        let state = stateDirectory ?? environment["STATE_DIRECTORY"]?.split(separator: ":").first.map(String.init)
            ?? "/var/lib/tether-forward"
        do {
            let loaded: TetherConfig
            do {
                loaded = try TetherConfig.load(path: path, instance: instance)
            } catch {
                throw Forwarder.StartFailure(description: "\(error)")
            }
            metricsSettings = loaded.metrics
            guard let mqtt = loaded.mqtt else {
                throw Forwarder.StartFailure(description: "\(path): tether forward needs an [mqtt] table with at least url = \"mqtt://HOST\"")
            }
            if let refusal = mqtt.cleartextPasswordRefusal { throw Forwarder.StartFailure(description: "\(refusal)") }
            settings = try Forwarder.Settings(
                config: loaded, mqtt: mqtt, instance: instance, hostname: Forwarder.Settings.hostname, stateDirectory: state
            )
        } catch {
            logger.critical("\(error)")
            LoggingSetup.flush()
            throw ExitCode(DaemonRunner.Exit.config)
        }

        do throws(StateDirectory.Failure) {
            try StateDirectory.prepare(state)
        } catch {
            logger.critical("\(error)")
            LoggingSetup.flush()
            throw ExitCode(DaemonRunner.Exit.cannotCreate)
        }

        let loop = EventLoop(name: "tether-forward")
        let forwarder = Forwarder(settings: settings, loop: loop, logger: logger)
        let exporter = metricsSettings.forwardTextfile.map { path in
            let metrics = ForwarderMetrics(instanceName: "\(instance)", forwarder: forwarder, readingsDirectory: settings.readingsDirectory)
            return (metrics, MetricsTextfileWriter(path: path, registry: metrics.registry, logger: logger))
        }
        let started: Forwarder.StartFailure? = await withCheckedContinuation { continuation in
            loop.execute {
                do throws(Forwarder.StartFailure) {
                    try forwarder.start()
                    continuation.resume(returning: nil)
                } catch {
                    continuation.resume(returning: error)
                }
            }
        }
        if let started {
            logger.critical("\(started)")
            LoggingSetup.flush()
            loop.stop()
            throw ExitCode(DaemonRunner.Exit.config)
        }
        let notifier = SystemdNotifier(environment: environment)
        _ = notifier.ready()
        let watchdog = SystemdNotifier.watchdogInterval(environment: environment, pid: getpid())
        // The watchdog's sleep and the metrics file's I/O, off the forwarder's
        // loop and off libdispatch's pool (see `tether run`); no thread when
        // there is neither (started by hand).
        let io = watchdog != nil || exporter != nil ? EventLoop(name: "tether-io") : nil
        let signalFailure = await withTaskGroup(of: TerminationSignal.Unavailable?.self) { group in
            if let watchdog, let io {
                // Petted only while the loop answers; a wedged loop is logged,
                // and does not hold up the stop.
                let petter = SupervisorWatchdog(notifier: notifier, logger: logger, loop: loop, loopName: "the forwarder's loop")
                group.addTask(executorPreference: io) {
                    await petter.run(timeout: watchdog, on: io.clock)
                    return nil
                }
            }
            if let (metrics, writer) = exporter, let io {
                // Runs until the stop; ending by itself it would end the group.
                group.addTask(executorPreference: io) {
                    await writer.run(every: metricsSettings.interval, on: io.clock, refresh: metrics.refresh)
                    return nil
                }
            }
            group.addTask {
                do throws(TerminationSignal.Unavailable) {
                    let name = try await TerminationSignal.wait(on: loop) {
                        logger.notice("received SIGHUP: ignored; tether forward does not reload its configuration (systemctl restart applies a changed one)")
                    }
                    logger.info("\(name ?? "cancelled"): stopping")
                    return nil
                } catch {
                    return error
                }
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        _ = notifier.stopping()
        await withCheckedContinuation { continuation in
            loop.execute {
                forwarder.stop()
                continuation.resume()
            }
        }
        loop.stop()
        io?.stop()
        if let (metrics, writer) = exporter {
            metrics.refresh()
            metrics.stopped()
            writer.write()
        }
        if let signalFailure {
            logger.critical("\(signalFailure)")
            LoggingSetup.flush()
            throw ExitCode(DaemonRunner.Exit.osError)
        }
        LoggingSetup.flush()
    }
}
