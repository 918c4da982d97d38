import BlueZ
import Configuration
import ControlAPI
import DBus
import EventLoop
import FoundationEssentials
import LinkPolicy
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import HCI
import LinkSupervisor
import Logging
import Readings
import Rfkill
import Synchronization
import ControllerDevice

/// Runs the supervisor against bluetoothd on one event loop: the adapter
/// layer between the pure `Supervisor` and the world.
///
/// Threading: everything below runs on `loop`'s thread, one event at a time:
/// bluetoothd's signals (handed over synchronously by the bus), the
/// supervisor, the BlueZ calls it decides (`ActionLane`), their replies, the
/// timers, and the hand-off of each turn's readings to the recorder. Only
/// `status`, `reconnect`, `ping`, `changes` and `run` may be used from other
/// threads; they hop onto the loop. The blocking jobs, an HCI reset and the
/// USB reset and rebind, run on a child task off the loop (`blockingWork`).
///
/// Its jobs, one file each (`LinkService+<job>.swift`): `ControlAPI`
/// (status, reconnect, ping), `Readings` (notifications to the recorder),
/// `BluetoothdView` (the object tree into the supervisor's observation),
/// `DropReasons` (the management socket, bluetoothd's liveness, each drop's
/// line), `Rfkill`, `ControllerCheck` (a controller that never came up),
/// `Supervisor` (events in, actions carried out) and `BlockingWork`. The
/// decisions are in pure types they feed: `Supervisor`, `LinkResolver`,
/// `DropAccount`, `ControllerInitCheck`, `BluezLiveness`, and LinkCore's
/// `BlueZReplies` and `EscalationRun` (through `ActionLane`).
///
/// Invariants:
/// - effects reach bluetoothd in the order the supervisor decided them: each
///   action is sent on the bus when it is performed, before the next one,
///   and replies come back as events (`ActionLane`);
/// - an event that arrives while another is being handled (a reply that
///   completes at once) waits for it: actions are never interleaved;
/// - every task is a child of `run()`'s task group: cancelling `run()` ends
///   them all, after the signals that already reached the socket have been
///   recorded (see `run`);
/// - the link reads the time only from its loop (`loop.now`, the loop's
///   timers) and from `wallClock` (the wall time readings, drops and
///   "connected since" carry), so that the deterministic simulation runs it
///   on a virtual loop and a virtual wall clock that may jump.
public final class LinkService: @unchecked Sendable {
    // @unchecked: the loop-confined state below is touched on `loop` only;
    // `shared` is a Mutex.

    public typealias Status = LinkStatus

    /// The daemon's loop takes a dense notification stream in batches at most
    /// this far apart (see `EventLoop.moderation`): at 2,000/s about 8
    /// readings per wake-up and per write(2). Readings reach write(2) within
    /// it, and timers (the keep-alive) are never delayed by it; a link event
    /// that arrives among dense notifications waits up to this long. 10 ms
    /// cost no less CPU at 2,000/s and 6 ms more on a drop's recovery.
    public static let loadModeration: Duration = .milliseconds(4)

    /// What `status` reads from any thread. Its moments are on the loop's
    /// monotonic clock: `status` dates them back from the wall clock's
    /// reading at the time it answers, so a step of the wall clock in
    /// between (NTP's first answer after a boot at 1970) changes no age
    /// ("connected for", "… ago") and leaves every date in the clock's
    /// current frame.
    struct Shared {
        var adapter: String?
        /// What the adapter's controller is: "UART (hci_uart on ttyAMA0)".
        var controller: String?
        var device: String?
        var supervisor = Supervisor.Status()
        var connectedSince: MonotonicInstant?
        #if DST_BUG_STATUS_WALL_AGES  // planted bug (make dst-selftest): "connected since" is the wall clock's reading when the link came up
        var connectedSinceWall: Date?
        #endif
        /// While the dongle is away: when it was last seen.
        var awaySince: MonotonicInstant?
        /// The dongle this gateway is bound to (`DongleBindingWatch`).
        var boundDongle: String?
        /// The dongle's DFU bootloader's address while it advertises (`DongleIdentity`).
        var bootloader: String?
        /// The end of the loop turn that took the last reading.
        var lastReadingAt: MonotonicInstant?
        var lastDisconnectReason: String?
        var lastDisconnectAt: MonotonicInstant?
        var adapterProblem: String?
        /// Since when bluetoothd has not answered (`BluezLiveness`).
        var bluezUnansweredSince: MonotonicInstant?
        var stopped = false
    }

    public let loop: EventLoop
    let config: TetherConfig
    let client: BlueZClient
    let recorder: ReadingRecorder
    let report: LinkReportLog
    let resolver: LinkResolver
    let metrics: LinkMetrics?
    let shared = Mutex(Shared())
    /// When the service was made, on the loop's clock: the supervisor's time is since then.
    let start: MonotonicInstant
    /// The wall clock: readings' arrival, drops, "connected since".
    let wallClock: @Sendable () -> Date
    /// What each reading is stamped with besides the wall clock.
    let bootClock: BootClock
    /// When `.othersAdvertising` was last told to the supervisor.
    var othersAdvertisingToldAt: Duration?
    /// When other devices are let in again (`DeviceScope`).
    var samplingPause: EventLoop.TimerID?
    let changeInput: AsyncStream<LinkStatusChange>.Continuation
    let blockingInput: AsyncStream<BlockingJob>.Continuation
    /// Where the blocking jobs run: the daemon's io thread.
    let blockingWork: any TaskExecutor
    /// The controllers' kernel side (`ControllerKernel`): resets, the
    /// controller check, the kernel's controller list.
    let kernel: any ControllerKernel
    let blockingJobs: AsyncStream<BlockingJob>

    /// Every change of state, attempt, error or schedule, newest kept if the
    /// consumer (control API, sd_notify) falls behind. One consumer.
    public let changes: AsyncStream<LinkStatusChange>

    // MARK: Loop-confined state

    var supervisor: Supervisor
    let timers: SupervisorTimers
    let requests: ReconnectRequests
    var lane: ActionLane!
    lazy var liveness = BluezLiveness(
        loop: loop,
        ping: { [unowned self] timeout, answered in
            // Any reply, an error too, is an answer; only a timeout is not.
            lane.send(.ping(timeout: timeout)) { result in
                if case .failure(let error) = result, error.isNoReply { answered(false) } else { answered(true) }
            }
        },
        changed: { [unowned self] since in bluezAnsweringChanged(since) }
    )
    var monitor: BlueZMonitor!
    var tree = ObjectTree()
    var bluezPresent = false
    var resolution = LinkResolver.Resolution()
    var adapterWatch: AdapterWatch
    var lastObservation: LinkObservation?
    /// Notify characteristics by object path, for the readings' fast path.
    var notifyPaths: [(path: String, uuid: String)] = []
    /// Acquired notification sockets by characteristic (AcquireNotify), for
    /// this link only.
    var notifyReaders: [ObjectPath: NotificationSocketReader] = [:]
    var deviceAddress: String
    /// The dongle this gateway is bound to, for a config that finds it by
    /// name or service.
    var binding: DongleBindingWatch
    /// The identity address the dongle moved to after pairing, and its DFU
    /// bootloader while that advertises.
    var identity = DongleIdentity()
    /// The address the dongle is known by, nil while any matching device
    /// may be it: the configured one, else the binding, either as followed
    /// to its identity address.
    var dongleAddress: String? { identity.followed ?? config.dongle.address ?? binding.bound }
    /// Readings taken and not yet handed to the recorder: this turn's, and
    /// in a dense stream those of the turns since the last hand-off (see
    /// `handOffSpacing`).
    var turnReadings: [Reading] = []
    /// The arrival time of the last reading taken this turn, if any.
    var lastTakenThisTurn: Date?
    /// When readings were last handed to the recorder, and the loop timer
    /// that hands in the ones held since.
    var lastHandOff: MonotonicInstant?
    var handOffTimer: EventLoop.TimerID?
    /// A notification arrived this loop turn: the supervisor hears of it
    /// once, at the turn's end (its silence limit looks at the last one).
    var notifiedThisTurn = false
    var stopping = false
    /// Each drop and why it happened, told in order (`DropAccount`), with
    /// the wall time of the last drop logged and the wait for its reason.
    var drops = DropAccount()
    var lastDropAt: (wall: Date, instant: MonotonicInstant)?
    var dropWait: EventLoop.TimerID?
    /// bluetoothd was seen sending `Device1.Disconnected` (BlueZ ≥ 5.83).
    var bluezSendsReasons = false
    /// The kernel's management socket, when this process may hear Device
    /// Disconnected on it (CAP_NET_ADMIN); why not, when it may not.
    var management: ManagementSocket?
    var managementWatch: EventLoop.WatchID?
    var managementUnavailable = "the kernel's management socket was not opened"
    /// Whether the management socket opened, or may: false once an open failed.
    var managementUsable = true
    /// Whether to open it (tests on a machine with Bluetooth may not want
    /// the real kernel's reasons).
    let kernelReasons: Bool
    /// A kernel controller that failed its initialisation (see `ControllerInitCheck`).
    var initCheck: ControllerInitCheck
    var initCheckTimer: EventLoop.TimerID?
    /// Tether's Agent1, when it pairs (`dongle.pairing`).
    let agent: PairingAgent?
    var adapterProblem: String?
    /// `/dev/rfkill` (nil: not watched), its switches, and why it is not
    /// watched when it is not.
    let rfkillSource: RfkillSource?
    var rfkill: RfkillDevice?
    var rfkillWatch: EventLoop.WatchID?
    var switches = RfkillSwitches()
    /// The address of the adapter used last (see `LinkResolver.resolve`).
    var lastAdapterAddress: String?
    var turnEndHook: Int?
    var queuedEvents: [SupervisorEvent] = []
    var handlingEvent = false
    var published: PublishedFields?
    /// A reading was written since start (loop-confined twin of `lastReadingAt`).
    var anyReadingWritten = false
    var resolutionChangedSincePublish = true
    /// Told every decision of the supervisor, before it is carried out:
    /// what the deterministic simulation's invariants judge. Nil in the
    /// daemon (then nothing of it is computed). Loop-confined.
    @_spi(Simulation) public var decisionObserver: ((SupervisorDecision) -> Void)?

    public init(
        config: TetherConfig, bus: Bus, recorder: ReadingRecorder, logger: Logger, metrics: LinkMetrics? = nil,
        kernelReasons: Bool = true, rfkill: RfkillSource? = RfkillSource(),
        seed: UInt64 = UInt64.random(in: .min ... .max), blockingWork: any TaskExecutor = globalConcurrentExecutor,
        kernel: any ControllerKernel = SystemControllerKernel(),
        passkey: Passkey? = nil, wallClock: @escaping @Sendable () -> Date = { Date() }, bootClock: BootClock = .none
    ) {
        self.blockingWork = blockingWork
        self.kernel = kernel
        self.wallClock = wallClock
        self.bootClock = bootClock
        start = bus.loop.now
        self.kernelReasons = kernelReasons
        rfkillSource = rfkill
        initCheck = ControllerInitCheck(name: config.bluez.adapter, address: config.bluez.adapterAddress)
        loop = bus.loop
        self.metrics = metrics
        self.config = config
        client = BlueZClient(bus: bus)
        self.recorder = recorder
        report = LinkReportLog(logger: logger, pairingMethod: config.dongle.pairing.method, wallClock: wallClock)
        resolver = LinkResolver(config: config)
        binding = DongleBindingWatch(config: config, matchedBy: resolver.matchDescription)
        let loaded = binding.load()
        if let notice = loaded.notice { logger.notice("\(notice)", metadata: ["event": "dongle-bound"]) }
        if let error = loaded.error { logger.error("\(error)", metadata: ["event": "dongle-binding-unreadable"]) }
        let bound = binding.bound
        adapterWatch = AdapterWatch(config: config.bluez)
        supervisor = Supervisor(settings: Supervisor.Settings(config: config), seed: seed)
        timers = SupervisorTimers(loop: bus.loop)
        requests = ReconnectRequests(loop: bus.loop)
        deviceAddress = config.dongle.address ?? ""
        (changes, changeInput) = AsyncStream.makeStream(of: LinkStatusChange.self, bufferingPolicy: .bufferingNewest(32))
        (blockingJobs, blockingInput) = AsyncStream.makeStream(of: BlockingJob.self, bufferingPolicy: .unbounded)
        shared.withLock {
            $0.device = config.dongle.address ?? bound
            $0.boundDongle = bound
        }
        agent = config.dongle.pairing.pairs
            ? PairingAgent(
                pairing: config.dongle.pairing, passkey: passkey, address: config.dongle.address, logger: logger,
                now: { [loop = bus.loop] in loop.now }) : nil
    }

    // MARK: Running

    /// Runs until the task is cancelled or the bus connection closes. On
    /// cancellation it first removes its match rules and waits for the bus's
    /// answer, so every notification the bus routed to it before is recorded.
    public func run() async throws(BlueZError) {
        await onLoop { [self] in
            lane = ActionLane(
                client: client, loop: loop, config: config, logger: report.logger, wallClock: wallClock
            ) { [unowned self] event in
                deliver(event)
            }
            lane.onReading = { [unowned self] reading in take(reading) }
            lane.onAcquired = { [unowned self] characteristic, acquired in read(acquired, of: characteristic) }
            lane.onUnanswered = { [unowned self] in liveness.callUnanswered() }
            lane.agent = agent
            monitor = BlueZMonitor(client: client) { [unowned self] event in apply(event) }
            client.bus.assumeIsolated { bus in
                bus.setSignalInterceptor { [unowned self] signal in intercept(signal) }
            }
            turnEndHook = loop.addTurnEndHook { [unowned self] in writeTurnReadings() }
            if kernelReasons { openManagementSocket() }
            openRfkill()
        }
        if let agent {
            do {
                try await client.bus.export(PairingAgent.path, [agent.interface])
            } catch {
                report.logger.error("cannot export Tether's pairing agent: \(error); pairing will fail")
            }
        }
        do {
            try await monitor.start { [unowned self] message in monitor.handle(message) }
        } catch {
            await onLoop { [self] in tearDown() }
            blockingInput.finish()
            changeInput.finish()
            throw error
        }
        await onLoop { [self] in monitor.queryOwner() }

        await withTaskGroup(of: Void.self) { group in
            group.addTask(executorPreference: blockingWork) { [self] in await runBlockingJobs() }
            group.addTask { [client] in await client.bus.waitUntilClosed() }
            group.addTask { await waitForCancellation() }
            // Cancellation or the bus going away ends the service.
            _ = await group.next()
            // Signals already routed to us are handled before the rules go.
            await monitor.stop()
            await onLoop { [self] in tearDown() }
            blockingInput.finish()
            group.cancelAll()
        }
        changeInput.finish()
    }

    func tearDown() {
        stopping = true
        carryOut(drops.stopping())
        closeNotifyReaders()
        writeTurnReadings()
        if let handOffTimer { loop.cancelTimer(handOffTimer) }
        handOffTimer = nil
        if let turnEndHook { loop.removeTurnEndHook(turnEndHook) }
        turnEndHook = nil
        closeManagementSocket()
        closeRfkill()
        if let initCheckTimer { loop.cancelTimer(initCheckTimer) }
        if let samplingPause { loop.cancelTimer(samplingPause) }
        samplingPause = nil
        initCheckTimer = nil
        client.bus.assumeIsolated { $0.setSignalInterceptor(nil) }
        timers.cancelAll()
        lane?.cancelAll()
        shared.withLock { $0.stopped = true }
        requests.answerAll(.notReady("the daemon is stopping"))
    }

    /// Runs `body` on the loop and waits for it.
    func onLoop(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute {
                body()
                continuation.resume()
            }
        }
    }
}

/// Returns when the current task is cancelled.
func waitForCancellation() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    await withTaskCancellationHandler {
        for await _ in stream {}
    } onCancel: {
        continuation.finish()
    }
}

/// One decision of the supervisor, as `LinkService.decisionObserver` sees it.
@_spi(Simulation) public struct SupervisorDecision: Sendable {
    public var event: SupervisorEvent
    /// The supervisor's status before and after the event.
    public var statusBefore: Supervisor.Status
    public var actions: [SupervisorAction]
    public var status: Supervisor.Status
}
