import BlueZ
import Configuration
import ControlAPI
import DBus
import EventLoop
import FoundationEssentials
import Logging
import Pacing
import Readings
import Rfkill
import Synchronization
import Systemd

/// What the link service is given besides the bus and the config: where the
/// world reaches it around bluetoothd (rfkill, the kernel's controllers and
/// management socket), its clocks' seed and wall time. The daemon uses the
/// defaults; the deterministic simulation passes its simulated controller,
/// no rfkill or management socket, a seed and a wall clock that can jump.
public struct LinkEnvironment: Sendable {
    public var rfkill: RfkillSource?
    public var passkey: Passkey?
    /// Whether the kernel's management socket is read for disconnect reasons.
    public var kernelReasons: Bool
    public var kernel: any ControllerKernel
    /// Each link service's jitter seed; nil: a random one.
    public var seed: UInt64?
    public var wallClock: @Sendable () -> Date
    /// The boot's identity, time since boot and the clock's synchronisation
    /// that every reading carries (`BootStamp`).
    public var bootClock: BootClock

    public init(
        rfkill: RfkillSource? = RfkillSource(), passkey: Passkey? = nil, kernelReasons: Bool = true,
        kernel: any ControllerKernel = SystemControllerKernel(), seed: UInt64? = nil,
        wallClock: @escaping @Sendable () -> Date = { Date() }, bootClock: BootClock = .system()
    ) {
        self.bootClock = bootClock
        self.rfkill = rfkill
        self.passkey = passkey
        self.kernelReasons = kernelReasons
        self.kernel = kernel
        self.seed = seed
        self.wallClock = wallClock
    }
}

/// One run of the daemon: the bus connection (remade if the bus goes away),
/// the link service on it, the control object and systemd's notifications.
///
/// Threading: `serve` runs as a task that prefers `loop`; every link service
/// it makes runs on `loop`, its blocking work on `io`. `unreadDrops` and the
/// watchdog's view of the current link are read from other threads (Mutexes).
public final class DaemonSession: Sendable {
    /// Makes a bus connection on the loop given (the system bus, a bus at an
    /// address, or the simulation's in-process bus).
    public typealias Connector = @Sendable (EventLoop) async throws(DBusError) -> Bus

    let config: TetherConfig
    let address: ControlAddress
    let connect: Connector
    let recorder: ReadingRecorder
    let logger: Logger
    let notifier: SystemdNotifier
    let loop: EventLoop
    let io: EventLoop
    let metrics: LinkMetrics?
    let link: LinkEnvironment
    /// Told each link service as it is made, on the loop, before it runs
    /// (the deterministic simulation watches its decisions).
    let onLinkService: (@Sendable (LinkService) -> Void)?
    /// The link being served right now; nil while (re)connecting to the bus.
    private let current = Mutex<(any ControlledLink)?>(nil)
    /// The bus connection now, and what the ones before it dropped unread.
    private let buses = Mutex<(current: Bus?, closed: (signals: Int, calls: Int))>((nil, (0, 0)))

    /// The system bus, or the bus at `busAddress`.
    public static func connector(busAddress: String?) -> Connector {
        { loop throws(DBusError) in
            if let busAddress { try await Bus.connect(address: busAddress, on: loop) } else { try await Bus.system(on: loop) }
        }
    }

    /// Messages the daemon's bus connections dropped from their header alone, since start.
    /// The wall clock was stepped: the current link announces its dated
    /// moments again (`LinkService.clockWasSet`).
    public func clockWasSet() {
        current.withLock { $0 }?.clockWasSet()
    }

    public var unreadDrops: (signals: Int, calls: Int) {
        buses.withLock { buses in
            let now = buses.current?.unreadDrops ?? (signals: 0, calls: 0)
            return (buses.closed.signals + now.signals, buses.closed.calls + now.calls)
        }
    }

    private func retire(_ bus: Bus) {
        buses.withLock { buses in
            let drops = bus.unreadDrops
            buses.closed = (buses.closed.signals + drops.signals, buses.closed.calls + drops.calls)
            buses.current = nil
        }
    }

    public init(
        config: TetherConfig, address: ControlAddress, connect: @escaping Connector, recorder: ReadingRecorder,
        logger: Logger, notifier: SystemdNotifier, loop: EventLoop, io: EventLoop, metrics: LinkMetrics?,
        link: LinkEnvironment, onLinkService: (@Sendable (LinkService) -> Void)? = nil
    ) {
        self.loop = loop
        self.io = io
        self.metrics = metrics
        self.config = config
        self.address = address
        self.connect = connect
        self.recorder = recorder
        self.logger = logger
        self.notifier = notifier
        self.link = link
        self.onLinkService = onLinkService
    }

    /// Connects to the bus and runs the link service, reconnecting to the
    /// bus if it goes away, until cancelled. Returns an exit code when the
    /// daemon cannot go on (its name is taken or forbidden).
    public func serve() async -> Int32? {
        // The bus's return is tried 500 ms after it went, doubling to 10 s.
        let busBackoff = Backoff(first: .milliseconds(500), cap: .seconds(10))
        var failures = 0
        var lastWarning: MonotonicInstant?
        var ready = false
        while !Task.isCancelled {
            let bus: Bus
            do {
                bus = try await connect(loop)
            } catch {
                // Say so at once, then once a minute while it lasts.
                if lastWarning.map({ $0.duration(to: loop.now) >= .seconds(60) }) ?? true {
                    // A connectFailed says "cannot connect to D-Bus" itself.
                    let what = if case .connectFailed = error { "\(error)" } else { "cannot connect to D-Bus: \(error)" }
                    logger.error("\(what); retrying")
                    lastWarning = loop.now
                }
                try? await loop.sleep(for: busBackoff.delay(afterFailures: failures))
                failures += 1
                continue
            }
            if lastWarning != nil { logger.notice("connected to D-Bus") }
            lastWarning = nil
            failures = 0

            let service = LinkService(
                config: config, bus: bus, recorder: recorder, logger: logger, metrics: metrics,
                kernelReasons: link.kernelReasons, rfkill: link.rfkill, seed: link.seed ?? UInt64.random(in: .min ... .max),
                blockingWork: io, kernel: link.kernel, passkey: link.passkey, wallClock: link.wallClock,
                bootClock: link.bootClock)
            onLinkService?(service)
            let control = ControlServer(bus: bus, address: address, link: service)
            do {
                try await control.export()
                try await bus.requestName(address.busName)
            } catch {
                await bus.close()
                if error.name == DBusErrorName.accessDenied {
                    logger.critical(
                        "the D-Bus policy does not let this user own \(address.busName): \(error.message); is io.tether.Tether.conf installed in /usr/share/dbus-1/system.d and the daemon running as user tether?"
                    )
                    return DaemonRunner.Exit.noPermission
                }
                if case .remote(DBusErrorName.failed, _) = error {
                    logger.critical("\(address.busName) is taken: another tether daemon runs for instance '\(address.instance)'")
                    return DaemonRunner.Exit.unavailable
                }
                logger.error("cannot publish the control interface: \(error); reconnecting to D-Bus")
                try? await loop.sleep(for: .seconds(1))
                continue
            }
            if !ready {
                ready = true
                _ = notifier.send([("READY", "1"), ("STATUS", "started; looking for the dongle")])
                logger.notice(
                    "serving \(ControlAddress.interface) as \(address.busName) at \(address.path)",
                    metadata: ["instance": "\(address.instance)"]
                )
            }
            current.withLock { $0 = service }
            buses.withLock { $0.current = bus }
            await withTaskGroup(of: Void.self) { group in
                // Ends when the service does (it finishes `changes`).
                group.addTask { [notifier] in
                    for await change in service.changes {
                        await control.publish(change)
                        _ = notifier.status(change.status.summary())
                    }
                }
                // Control API calls (Reconnect) run as children of this group.
                group.addTask { await bus.serveMethodCalls() }
                do {
                    try await service.run()
                } catch where !Task.isCancelled {
                    logger.error("cannot watch bluetoothd: \(error)")
                } catch {}
                group.cancelAll()
            }
            current.withLock { $0 = nil }
            retire(bus)
            await bus.close()
            if !Task.isCancelled {
                logger.warning("lost the D-Bus connection; reconnecting")
                _ = notifier.status("reconnecting to D-Bus")
                try? await loop.sleep(for: .seconds(1))
            }
        }
        return nil
    }

    func petWatchdog(timeout: Duration) async {
        let watchdog = SupervisorWatchdog(notifier: notifier, logger: logger) { [self] in current.withLock { $0 } }
        // Its sleep is on the io thread's timers, not the loop's: a loop that
        // hangs must still be seen, and said, before the ping is withheld.
        await watchdog.run(timeout: timeout, on: io.clock)
    }
}
