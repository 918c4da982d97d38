import BlueZ
import Configuration
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
import USBDevice

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
/// Invariants:
/// - effects reach bluetoothd in the order the supervisor decided them: each
///   action is sent on the bus when it is performed, before the next one,
///   and replies come back as events (`ActionLane`);
/// - an event that arrives while another is being handled (a reply that
///   completes at once) waits for it: actions are never interleaved;
/// - every task is a child of `run()`'s task group: cancelling `run()` ends
///   them all, after the signals that already reached the socket have been
///   recorded (see `run`).
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

    private struct Shared {
        var adapter: String?
        var device: String?
        var supervisor = Supervisor.Status()
        var connectedSince: Date?
        /// While the dongle is away: when it was last seen, on the wall clock.
        var awaySince: Date?
        /// The dongle this gateway is bound to (`DongleBindingWatch`).
        var boundDongle: String?
        /// The dongle's DFU bootloader's address while it advertises (`DongleIdentity`).
        var bootloader: String?
        var lastReadingAt: Date?
        var lastDisconnectReason: String?
        var lastDisconnectAt: Date?
        var adapterProblem: String?
        /// Since when bluetoothd has not answered (`BluezLiveness`).
        var bluezUnansweredSince: MonotonicInstant?
        var stopped = false
    }

    public let loop: EventLoop
    private let config: TetherConfig
    private let client: BlueZClient
    private let recorder: ReadingRecorder
    private let report: LinkReportLog
    private let resolver: LinkResolver
    private let metrics: LinkMetrics?
    private let shared = Mutex(Shared())
    private let start = MonotonicInstant.now
    /// When `.othersAdvertising` was last told to the supervisor.
    private var othersAdvertisingToldAt: Duration?
    /// When other devices are let in again (`DeviceScope`).
    private var samplingPause: EventLoop.TimerID?
    private let changeInput: AsyncStream<LinkStatusChange>.Continuation
    private let blockingInput: AsyncStream<BlockingJob>.Continuation
    /// Where the blocking jobs run: the daemon's io thread.
    private let blockingWork: any TaskExecutor
    private let blockingJobs: AsyncStream<BlockingJob>

    /// Every change of state, attempt, error or schedule, newest kept if the
    /// consumer (control API, sd_notify) falls behind. One consumer.
    public let changes: AsyncStream<LinkStatusChange>

    // MARK: Loop-confined state

    private var supervisor: Supervisor
    private let timers: SupervisorTimers
    private let requests: ReconnectRequests
    private var lane: ActionLane!
    private lazy var liveness = BluezLiveness(
        loop: loop,
        ping: { [unowned self] timeout, answered in
            // Any reply, an error too, is an answer; only a timeout is not.
            lane.send(.ping(timeout: timeout)) { result in
                if case .failure(let error) = result, error.isNoReply { answered(false) } else { answered(true) }
            }
        },
        changed: { [unowned self] since in bluezAnsweringChanged(since) }
    )
    private var monitor: BlueZMonitor!
    private var tree = ObjectTree()
    private var bluezPresent = false
    private var resolution = LinkResolver.Resolution()
    private var adapterWatch: AdapterWatch
    private var lastObservation: LinkObservation?
    /// Notify characteristics by object path, for the readings' fast path.
    private var notifyPaths: [(path: String, uuid: String)] = []
    /// Acquired notification sockets by characteristic (AcquireNotify), for
    /// this link only.
    private var notifyReaders: [ObjectPath: NotificationSocketReader] = [:]
    private var deviceAddress: String
    /// The dongle this gateway is bound to, for a config that finds it by
    /// name or service.
    private var binding: DongleBindingWatch
    /// The identity address the dongle moved to after pairing, and its DFU
    /// bootloader while that advertises.
    private var identity = DongleIdentity()
    /// The address the dongle is known by, nil while any matching device
    /// may be it: the configured one, else the binding, either as followed
    /// to its identity address.
    private var dongleAddress: String? { identity.followed ?? config.dongle.address ?? binding.bound }
    /// Readings taken and not yet handed to the recorder: this turn's, and
    /// in a dense stream those of the turns since the last hand-off (see
    /// `handOffSpacing`).
    private var turnReadings: [Reading] = []
    /// The arrival time of the last reading taken this turn, if any.
    private var lastTakenThisTurn: Date?
    /// When readings were last handed to the recorder, and the loop timer
    /// that hands in the ones held since.
    private var lastHandOff: MonotonicInstant?
    private var handOffTimer: EventLoop.TimerID?
    /// A notification arrived this loop turn: the supervisor hears of it
    /// once, at the turn's end (its silence limit looks at the last one).
    private var notifiedThisTurn = false
    private var stopping = false
    /// Each drop and why it happened, told in order (`DropAccount`), with
    /// the wall time of the last drop logged and the wait for its reason.
    private var drops = DropAccount()
    private var lastDropAt: Date?
    private var dropWait: EventLoop.TimerID?
    /// bluetoothd was seen sending `Device1.Disconnected` (BlueZ ≥ 5.83).
    private var bluezSendsReasons = false
    /// The kernel's management socket, when this process may hear Device
    /// Disconnected on it (CAP_NET_ADMIN); why not, when it may not.
    private var management: ManagementSocket?
    private var managementWatch: EventLoop.WatchID?
    private var managementUnavailable = "the kernel's management socket was not opened"
    /// Whether the management socket opened, or may: false once an open failed.
    private var managementUsable = true
    /// Whether to open it (tests on a machine with Bluetooth may not want
    /// the real kernel's reasons).
    private let kernelReasons: Bool
    /// A kernel controller that failed its initialisation (see `ControllerInitCheck`).
    private var initCheck: ControllerInitCheck
    private var initCheckTimer: EventLoop.TimerID?
    /// Tether's Agent1, when it pairs (`dongle.pairing`).
    private let agent: PairingAgent?
    private var adapterProblem: String?
    /// `/dev/rfkill` (nil: not watched), its switches, and why it is not
    /// watched when it is not.
    private let rfkillSource: RfkillSource?
    private var rfkill: RfkillDevice?
    private var rfkillWatch: EventLoop.WatchID?
    private var switches = RfkillSwitches()
    /// The address of the adapter used last (see `LinkResolver.resolve`).
    private var lastAdapterAddress: String?
    private var turnEndHook: Int?
    private var queuedEvents: [SupervisorEvent] = []
    private var handlingEvent = false
    private var published: PublishedFields?
    /// A reading was written since start (loop-confined twin of `lastReadingAt`).
    private var anyReadingWritten = false
    private var resolutionChangedSincePublish = true

    public init(
        config: TetherConfig, bus: Bus, recorder: ReadingRecorder, logger: Logger, metrics: LinkMetrics? = nil,
        kernelReasons: Bool = true, rfkill: RfkillSource? = RfkillSource(),
        seed: UInt64 = UInt64.random(in: .min ... .max), blockingWork: any TaskExecutor = globalConcurrentExecutor,
        passkey: Passkey? = nil
    ) {
        self.blockingWork = blockingWork
        self.kernelReasons = kernelReasons
        rfkillSource = rfkill
        initCheck = ControllerInitCheck(name: config.bluez.adapter, address: config.bluez.adapterAddress)
        loop = bus.loop
        self.metrics = metrics
        self.config = config
        client = BlueZClient(bus: bus)
        self.recorder = recorder
        report = LinkReportLog(logger: logger, pairingMethod: config.dongle.pairing.method)
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
            ? PairingAgent(pairing: config.dongle.pairing, passkey: passkey, address: config.dongle.address, logger: logger) : nil
    }

    // MARK: Running

    /// Runs until the task is cancelled or the bus connection closes. On
    /// cancellation it first removes its match rules and waits for the bus's
    /// answer, so every notification the bus routed to it before is recorded.
    public func run() async throws(BlueZError) {
        await onLoop { [self] in
            lane = ActionLane(client: client, loop: loop, config: config, logger: report.logger) { [unowned self] event in
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

    private func tearDown() {
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
    private func onLoop(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute {
                body()
                continuation.resume()
            }
        }
    }

    // MARK: Control API

    /// Drops the link (if any) and starts a fresh retry window, as `tether
    /// reconnect` asks. Returns once a connect attempt has started, when
    /// there is nothing to connect with (the supervisor says why), or after
    /// `limit` (an escalation step can hold the attempt back for seconds).
    public func reconnect(waitingUpTo limit: Duration = .seconds(20)) async -> ReconnectOutcome {
        await withCheckedContinuation { continuation in
            loop.execute { [self] in
                guard !shared.withLock({ $0.stopped }) else {
                    return continuation.resume(returning: .notReady("the daemon is stopping"))
                }
                requests.park(continuation, limit: limit) { [unowned self] in .pending(supervisor.state) }
                deliver(.reconnectRequested)
            }
        }
    }

    /// Calls `reply` from the loop, between two events: if it is not called,
    /// the loop is stuck (the watchdog then stops petting systemd).
    public func ping(_ reply: @escaping @Sendable () -> Void) {
        loop.execute(reply)
    }

    public var status: Status {
        let stats = recorder.stats
        let sinceStart = start.duration(to: .now)
        return shared.withLock { s in
            Status(
                state: s.supervisor.state, device: s.device, adapter: s.adapter, connectedSince: s.connectedSince,
                lastReadingAt: s.lastReadingAt, readingsWritten: stats.written,
                readingsPending: stats.pending, readingsDropped: stats.dropped,
                readingsError: stats.lastError, reconnects: s.supervisor.reconnects,
                windowAttempt: s.supervisor.windowAttempt,
                nextAttemptIn: s.supervisor.nextAttemptAt.map { max(.zero, $0 - sinceStart) },
                lastError: s.supervisor.lastError, silenceLimit: config.silenceLimit,
                silenceEvents: s.supervisor.silenceEvents, lastDisconnectReason: s.lastDisconnectReason,
                lastDisconnectAt: s.lastDisconnectAt, adapterProblem: s.adapterProblem,
                bondProblem: s.supervisor.bondProblem,
                // A signalled property, sent when it changes: no running time in it.
                bluezProblem: s.bluezUnansweredSince.map { _ in
                    "bluetoothd owns org.bluez but does not answer (a D-Bus ping unanswered for \(BluezLiveness.pingTimeout.roundedText)): "
                        + "hung; Tether waits for it (the package's bluetooth.service drop-in has systemd restart a hang of 10 s; else `systemctl restart bluetooth`)"
                },
                awaySince: s.awaySince, boundDongle: s.boundDongle, bootloader: s.bootloader
            )
        }
    }

    // MARK: Readings

    /// The fast path: a notification is a PropertiesChanged of Value alone on
    /// a notify characteristic, from bluetoothd. Decoded in place; anything
    /// else goes on to the general path.
    private func intercept(_ signal: RawSignal) -> Bool {
        guard !notifyPaths.isEmpty, signal.is(interface: StandardInterface.properties, member: "PropertiesChanged"),
              let owner = monitor.currentOwner
        else { return false }
        for entry in notifyPaths where signal.hasPath(entry.path) {
            guard signal.hasSender(owner),
                  let bytes = signal.onlyByteArrayProperty(interface: BlueZ.gattCharacteristicInterface, name: "Value")
            else { return false }
            takeNotification(bytes, characteristic: entry.uuid)
            return true
        }
        return false
    }

    /// Readings, and only they, make a turn "busy" for the loop's load
    /// moderation: replies to our own calls (a reconnect's) are never held back
    /// unless a dense stream of notifications is flowing.
    private func take(_ reading: Reading) {
        turnReadings.append(reading)
        lastTakenThisTurn = reading.receivedAt
        loop.noteBusy()
    }

    /// Readings go to the recorder's queue at most this often: each hand-off
    /// wakes its thread, and a dense stream (a turn every 4 ms, see
    /// `loadModeration`) would wake it every turn. A quiet stream's readings
    /// (turns further apart) are handed in at once; held ones wait at most
    /// this long, on a loop timer.
    static let handOffSpacing: Duration = .milliseconds(25)

    /// At the end of each loop turn: the supervisor hears of the turn's data,
    /// and the readings held go to the recorder in one batch, unless the last
    /// batch went less than `handOffSpacing` ago.
    private func writeTurnReadings() {
        if notifiedThisTurn {
            notifiedThisTurn = false
            if !stopping { dataArrived() }
        }
        handOffReadings()
        guard let last = lastTakenThisTurn else { return }
        lastTakenThisTurn = nil
        shared.withLock { $0.lastReadingAt = last }
        metrics?.readingsTaken(lastAt: last)
        if !anyReadingWritten {
            // STATUS= said "no reading yet": say otherwise now, not at the
            // next watchdog tick (up to 15 s later). Later readings only age
            // the line, which each tick refreshes.
            anyReadingWritten = true
            publishIfChanged([])
        }
    }

    private func handOffReadings() {
        guard !turnReadings.isEmpty else { return }
        let now = MonotonicInstant.now
        if !stopping, let previous = lastHandOff, previous.duration(to: now) < Self.handOffSpacing {
            if handOffTimer == nil {
                // Its turn ends with this hook, which then hands them in.
                handOffTimer = loop.schedule(at: previous + Self.handOffSpacing) { [unowned self] in handOffTimer = nil }
            }
            return
        }
        if let handOffTimer { loop.cancelTimer(handOffTimer) }
        handOffTimer = nil
        recorder.write(turnReadings)
        turnReadings.removeAll(keepingCapacity: true)
        lastHandOff = now
    }

    // MARK: bluetoothd's view

    private func apply(_ event: BlueZEvent) {
        switch event {
        case .serviceAppeared, .serviceVanished, .serviceUnanswered:
            break  // the bus's news, not bluetoothd's
        default:
            // Anything bluetoothd sends says it runs again (a hang it came out of).
            if liveness.unansweredSince != nil { liveness.heardFrom() }
        }
        switch event {
        case .valueChanged(let path, let bytes):
            recordValue(path, bytes)
            return
        case .propertiesChanged(let path, BlueZ.gattCharacteristicInterface, let changed, _):
            // bluetoothd flushes a notification's Value together with any
            // property change still pending on the object (Notifying=true
            // right after StartNotify): a reading all the same.
            if let bytes = changed["Value"]?.bytes { recordValue(path, bytes) }
        case .deviceDisconnected(let path, let reason, _):
            bluezSendsReasons = true
            if path == resolution.device?.path {
                let heard = DisconnectReasons.Reason(bluezReason: reason)
                reasonHeard(heard, address: deviceAddress)
                if heard == .authenticationFailure { deliver(.bondRejected("bluetoothd: \(reason)")) }
            }
            return
        case .serviceAppeared:
            bluezPresent = true
            forgetBluezLiveness()
            // Agents die with bluetoothd: register (again) before anything
            // else is sent to this one, which alone the agent answers.
            agent?.setBluezOwner(monitor.currentOwner)
            if let agent { lane.registerAgent(agent) }
        case .serviceUnanswered(let owner, let error):
            // Still waiting for bluetoothd: nothing to resolve without its tree.
            report.logger.warning(
                "bluetoothd (\(owner)) owns org.bluez but gives no object tree: \(error); asking again every minute at most (a bluetoothd hung for good needs systemctl restart bluetooth)",
                metadata: ["event": "bluez-unanswered"]
            )
            return
        case .serviceVanished:
            bluezPresent = false
            forgetBluezLiveness()
            agent?.setBluezOwner(nil)
        default:
            break
        }
        followAddressChange(event)
        tree.apply(event)
        // In a crowded place discovery reports many other devices; their
        // RSSI updates cannot change which adapter, dongle or
        // characteristics we use, so they skip the re-resolution.
        if let advertiser = advertiser(in: event), advertiser != resolution.device?.path {
            othersAdvertised()
            noticeBootloader(at: advertiser)
        }
        if case .propertiesChanged(let path, BlueZ.deviceInterface, let changed, let invalidated) = event, path != resolution.device?.path {
            // Another device: once the dongle's object is known nothing it
            // does changes the resolution. Before (the dongle away, its
            // object gone), an advertisement's fields of a device that
            // cannot be the dongle change nothing either: only this one
            // object is looked at, not the tree.
            if resolution.device != nil { return }
            if Self.advertisementOnly(changed, invalidated), let device = tree.device(path),
               !resolver.mayBeTheDongle(device, known: dongleAddress)
            {
                return
            }
        }
        let previous = resolution
        resolution = annotated(resolver.resolve(tree, bluezPresent: bluezPresent, lastAddress: lastAdapterAddress, known: dongleAddress))
        if let adapter = resolution.adapter {
            for note in binding.matched(resolver.matchingDevices(tree, adapter: adapter), chosen: resolution.device?.address) {
                report.logger.notice("\(note)", metadata: ["event": "dongle-matches"])
            }
        }
        if let address = resolution.adapter?.address, !address.isEmpty, address != "00:00:00:00:00:00" {
            lastAdapterAddress = address.uppercased()
        }
        if resolution != previous { resolutionChangedSincePublish = true }
        if bluezPresent, resolution.adapter != previous.adapter || previous.adapter == nil {
            for note in adapterWatch.update(resolved: resolution.adapter, adapters: tree.adapters) {
                report.logger.notice("\(note)", metadata: ["event": "\(note.eventName)"])
            }
        }
        notifyPaths = resolution.notify.map { ($0.path.rawValue, $0.uuid) }
        updateDeviceScope()
        if let address = resolution.device?.address { deviceAddress = address }
        agent?.setDongle(resolution.device?.path)
        let gattMoved = !previous.notify.isEmpty && previous.notify.map(\.path) != resolution.notify.map(\.path)
            && previous.device?.path == resolution.device?.path && resolution.observation.connected
        shared.withLock { s in
            s.adapter = resolution.adapter?.interfaceName
            s.device = resolution.device?.address ?? config.dongle.address
        }
        deliverObservationIfChanged()
        if gattMoved {
            report.logger.notice(
                "the dongle's GATT database changed: \(resolution.notify.isEmpty ? "its notify characteristics are gone for now" : "notify characteristics now at \(resolution.notify.map(\.path.rawValue).joined(separator: ", "))")",
                metadata: ["event": "gatt-changed"]
            )
            deliver(.characteristicsChanged)
        }
        if isAdvertisement(event, device: resolution.device?.path) {
            dongleSeen()
            deliver(.advertising)
        }
        updateControllerCheck()
        updateAdapterProblem()
    }

    /// Reads an acquired socket until bluetoothd closes it: each datagram is
    /// a notification, recorded as one that came as a signal. Its end is a
    /// link-loss sign for the supervisor (bluetoothd's Connected=false
    /// usually follows; whichever comes first counts).
    private func read(_ acquired: AcquiredNotifications, of characteristic: GattCharacteristic) {
        notifyReaders.removeValue(forKey: characteristic.path)?.close()
        let uuid = characteristic.uuid
        let path = characteristic.path
        notifyReaders[path] = NotificationSocketReader(acquired, loop: loop) { [unowned self] bytes in
            takeNotification(bytes, characteristic: uuid)
        } onEnd: { [unowned self] end in
            notifyReaders[path] = nil
            report.logger.debug("\(uuid): \(end)")
            deliver(.notificationsEnded(end.description))
        }
    }

    /// Gives every acquired socket back (closing it is how).
    private func closeNotifyReaders() {
        for reader in notifyReaders.values { reader.close() }
        notifyReaders.removeAll()
    }

    private func recordValue(_ path: ObjectPath, _ bytes: [UInt8]) {
        guard let entry = notifyPaths.first(where: { $0.path == path.rawValue }) else { return }
        takeNotification(bytes, characteristic: entry.uuid)
    }

    private func takeNotification(_ bytes: [UInt8], characteristic uuid: String) {
        notifiedThisTurn = true
        take(Reading(receivedAt: Date(), device: deviceAddress, characteristic: uuid, source: .notify, payload: bytes))
    }

    /// Hears Device1 changes of the dongle's object alone once its address
    /// (config or binding) and adapter are known, and samples the others
    /// (`DeviceScope`).
    private func updateDeviceScope() {
        let paths = DeviceScope.watchedPaths(address: dongleAddress, adapter: resolution.adapter?.path, resolved: resolution.device)
        guard paths != monitor.watchedDevices else { return }
        monitor.watchDevices(at: paths)
        if let samplingPause { loop.cancelTimer(samplingPause) }
        samplingPause = nil
        if paths != nil { monitor.sampleOtherDevices(true) }
    }

    /// The dongle's own object changed its Address: BlueZ learnt its
    /// identity address in pairing (`DongleIdentity`). Followed before the
    /// tree takes the change, so the resolution finds the same object.
    private func followAddressChange(_ event: BlueZEvent) {
        guard case .propertiesChanged(let path, BlueZ.deviceInterface, let changed, _) = event,
              let device = resolution.device, path == device.path, let address = changed["Address"]?.string
        else { return }
        let move = identity.addressChanged(
            of: device, to: address, newType: changed["AddressType"]?.string, knownAs: dongleAddress,
            configured: config.dongle.address, bound: binding.bound
        )
        switch move {
        case .followConfigured(let warning):
            report.logger.warning("\(warning)", metadata: ["event": "dongle-identity", "device": "\(address.uppercased())"])
        case .rebind(let to, let notice):
            report.logger.notice("\(notice)", metadata: ["event": "dongle-identity", "device": "\(to)"])
            if let error = binding.follow(to: to) {
                report.logger.error("\(error)", metadata: ["event": "dongle-binding-unstored"])
            }
            shared.withLock { $0.boundDongle = binding.bound }
        case nil:
            break
        }
    }

    /// Another device advertised: if it is the dongle's DFU bootloader, said
    /// once an episode and shown in status.
    private func noticeBootloader(at path: ObjectPath) {
        guard let address = dongleAddress, identity.bootloader == nil, let device = tree.device(path),
              DongleIdentity.isBootloader(device, of: address), let line = identity.bootloaderSeen(device, of: address)
        else { return }
        report.logger.notice("\(line)", metadata: ["event": "dongle-in-bootloader", "device": "\(device.address)"])
        shared.withLock { $0.bootloader = device.address }
        metrics?.observeBootloader(true)
        resolutionChangedSincePublish = true
        publishIfChanged([])
    }

    /// The dongle itself advertised or came online: a bootloader episode,
    /// if any, is over.
    private func dongleSeen() {
        guard identity.bootloader != nil, let address = dongleAddress, let line = identity.dongleSeen(address) else { return }
        report.logger.notice("\(line)", metadata: ["event": "dongle-left-bootloader", "device": "\(address)"])
        shared.withLock { $0.bootloader = nil }
        metrics?.observeBootloader(false)
        resolutionChangedSincePublish = true
        publishIfChanged([])
    }

    /// Device1 properties bluetoothd sets from each advertisement: none of
    /// them makes a device match the config (name, address, services do).
    static let advertisementProperties: Set<String> = [
        "RSSI", "TxPower", "ManufacturerData", "ServiceData", "AdvertisingData", "AdvertisingFlags",
    ]

    static func advertisementOnly(_ changed: [String: DBusValue], _ invalidated: [String]) -> Bool {
        changed.keys.allSatisfy(advertisementProperties.contains) && invalidated.allSatisfy(advertisementProperties.contains)
    }

    /// An RSSI update (or a newly found device object with one) is the sign
    /// that discovery saw the dongle advertise.
    private func isAdvertisement(_ event: BlueZEvent, device: ObjectPath?) -> Bool {
        guard let device else { return false }
        return advertiser(in: event) == device
    }

    /// The device an event shows advertising (an RSSI in a change or in a
    /// new object: bluetoothd sets it from an advertisement), if any.
    private func advertiser(in event: BlueZEvent) -> ObjectPath? {
        switch event {
        case .propertiesChanged(let path, let interface, let changed, _):
            return interface == BlueZ.deviceInterface && changed["RSSI"] != nil ? path : nil
        case .interfacesAdded(let path, let interfaces):
            return interfaces.stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary?["RSSI"] != nil ? path : nil
        default:
            return nil
        }
    }

    /// The link came online: a config that finds the dongle by name or
    /// service binds this gateway to it now, if nothing was bound.
    private func bindOnFirstLink(to address: String) {
        let bound = binding.online(with: address)
        if let notice = bound.notice {
            report.logger.notice("\(notice)", metadata: ["event": "dongle-bound", "device": "\(address)"])
            if let device = resolution.device, device.address == address, !device.bonded, DongleIdentity.isResolvablePrivate(device) {
                report.logger.warning(
                    "the dongle \(address) advertises a resolvable private address, which it changes every few minutes: the binding finds it again only once BlueZ knows its identity address, which pairing gives (dongle.pairing)",
                    metadata: ["event": "dongle-private-address", "device": "\(address)"])
            }
        }
        if let error = bound.error { report.logger.error("\(error)", metadata: ["event": "dongle-binding-unstored"]) }
        if bound.notice != nil || bound.error != nil { shared.withLock { $0.boundDongle = binding.bound } }
        updateDeviceScope()
    }

    /// Forgets the binding, then reconnects: the strongest matching device
    /// is tried and the first to come online is bound. For `tether rebind`.
    public func rebind(waitingUpTo limit: Duration = .seconds(20)) async -> RebindOutcome {
        if let address = config.dongle.address { return .fixedByConfig(address) }
        let forgotten = await withCheckedContinuation { (continuation: CheckedContinuation<Result<String?, DongleBinding.Failure>, Never>) in
            loop.execute { [self] in
                do throws(DongleBinding.Failure) {
                    let was = try binding.forget()
                    shared.withLock { $0.boundDongle = nil }
                    report.logger.notice(
                        "\(was.map { "the binding to \($0) is forgotten" } ?? "no dongle was bound") (tether rebind); the first matching device to come online will be bound",
                        metadata: ["event": "dongle-unbound"])
                    resolution = annotated(resolver.resolve(tree, bluezPresent: bluezPresent, lastAddress: lastAdapterAddress, known: nil))
                    updateDeviceScope()
                    deliverObservationIfChanged()
                    continuation.resume(returning: .success(was))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        switch forgotten {
        case .failure(let error): return .failed(error.description)
        case .success(let was): return .forgotten(was, await reconnect(waitingUpTo: limit))
        }
    }

    /// Another device advertised: evidence that the controller hears the
    /// air (`Supervisor.controllerEvidence`). Told at most every
    /// `othersAdvertisingEvery`: in a busy street they come many a second.
    private func othersAdvertised() {
        let now = start.duration(to: .now)
        if othersAdvertisingToldAt.map({ now - $0 >= Self.othersAdvertisingEvery }) ?? true {
            othersAdvertisingToldAt = now
            deliver(.othersAdvertising)
        }
        // Heard: the sample has done its job until the next one is due.
        guard monitor.samplingOtherDevices, let told = othersAdvertisingToldAt else { return }
        monitor.sampleOtherDevices(false)
        if let samplingPause { loop.cancelTimer(samplingPause) }
        samplingPause = loop.schedule(after: told + Self.othersAdvertisingEvery - now) { [unowned self] in
            samplingPause = nil
            if monitor.watchedDevices != nil { monitor.sampleOtherDevices(true) }
        }
    }

    static let othersAdvertisingEvery: Duration = .seconds(10)

    // MARK: Why the link dropped

    /// Where reasons can come from on this system; nil when none can.
    private var reasonSource: String? {
        if kernelReasons, managementUsable { return "the kernel's management socket" }
        return bluezSendsReasons ? "bluetoothd's Device1.Disconnected" : nil
    }

    /// Why no reason can come, for the log line.
    private var reasonUnavailableWhy: String {
        "bluetoothd (before 5.83) does not say, and \(managementUnavailable)"
    }

    /// Opens the management socket if the kernel will tell it why links
    /// drop; says once, at debug level, why not (a unit without
    /// CAP_NET_ADMIN, a kernel without Bluetooth): every drop's line says it too.
    private func openManagementSocket() {
        switch ManagementSocket.open() {
        case .success(let socket) where socket.trusted:
            management = socket
            managementWatch = loop.watch(socket.descriptor, interest: .readable) { [unowned self] _ in
                readManagementEvents()
            }
            report.logger.debug("disconnect reasons from the kernel's management socket")
        case .success(let socket):
            socket.close()
            managementUsable = false
            managementUnavailable = "Tether lacks CAP_NET_ADMIN, without which the kernel does not send the reason"
            report.logger.debug("no disconnect reasons: \(managementUnavailable)")
        case .failure(let failure):
            managementUsable = false
            managementUnavailable = "the kernel's management socket cannot be opened (\(failure))"
            report.logger.debug("no disconnect reasons: \(managementUnavailable)")
        }
    }

    private func closeManagementSocket() {
        if let managementWatch { loop.removeWatch(managementWatch) }
        managementWatch = nil
        management?.close()
        management = nil
    }

    /// The kernel's Device Disconnected events for the dongle, on the
    /// controller in use (any, while none is resolved).
    private func readManagementEvents() {
        guard let socket = management else { return }
        let index = resolution.adapter.flatMap { Int($0.interfaceName.dropFirst(3)) }
        for case .deviceDisconnected(let controller, let address, _, let code) in socket.readEvents() {
            guard index == nil || Int(controller) == index, address == deviceAddress.uppercased() else { continue }
            let heard = DisconnectReasons.Reason(managementCode: code)
            reasonHeard(heard, address: address)
            if heard == .authenticationFailure {
                deliver(.bondRejected("the kernel ended the link for an authentication failure (Device Disconnected reason 4)"))
            }
        }
        if let failure = socket.failure {
            managementUnavailable = failure
            managementUsable = false
            report.logger.warning("no more disconnect reasons: \(failure)")
            closeManagementSocket()
            kernelViewChanged()
        }
    }

    /// Adds to bluetoothd's view what only the kernel shows: rfkill's block
    /// on the controller and a controller that failed its initialisation.
    private func annotated(_ resolution: LinkResolver.Resolution) -> LinkResolver.Resolution {
        var result = resolution
        result.observation.radioBlock = radioBlock(adapter: resolution.adapter?.interfaceName)
        result.observation.controllerFailed = resolution.adapter == nil && initCheck.failed != nil
        // Heard while a link is made or held (the socket is closed between).
        result.observation.disconnectReasonsHeard = kernelReasons && managementUsable
        result.observation.bluezAnswering = liveness.unansweredSince == nil
        return result
    }

    /// bluetoothd stopped answering, or answers again (`BluezLiveness`).
    private func bluezAnsweringChanged(_ since: MonotonicInstant?) {
        let previous = shared.withLock { s in
            defer { s.bluezUnansweredSince = since }
            return s.bluezUnansweredSince
        }
        if since != nil {
            report.logger.error(
                "bluetoothd owns org.bluez but did not answer a D-Bus ping within \(BluezLiveness.pingTimeout.roundedText) after a call to it went unanswered: it is hung, not gone, and nothing reaches the dongle through it; Tether waits for it and asks again every 5 to 10 s (the package's bluetooth.service drop-in has systemd restart a hang of 10 s; else `systemctl restart bluetooth` ends it)",
                metadata: ["event": "bluez-unresponsive"]
            )
        } else if let previous {
            report.logger.notice(
                "bluetoothd answers again after \(previous.duration(to: .now).roundedText)", metadata: ["event": "bluez-answers"]
            )
        }
        kernelViewChanged()
    }

    /// A new bluetoothd (or none): the old one's silence no longer counts.
    private func forgetBluezLiveness() {
        liveness.reset()
        shared.withLock { $0.bluezUnansweredSince = nil }
    }

    /// Hands the supervisor the observation if it changed.
    private func deliverObservationIfChanged() {
        lane.resolution = resolution
        guard resolution.observation != lastObservation else { return }
        lastObservation = resolution.observation
        deliver(.observed(resolution.observation))
        lane.observationChanged(resolution.observation)
    }

    /// Something only the kernel shows changed: the observation is annotated again.
    private func kernelViewChanged() {
        resolution = annotated(resolution)
        deliverObservationIfChanged()
        updateAdapterProblem()
    }

    // MARK: rfkill

    /// The controller that rfkill and the USB steps act on: bluetoothd's
    /// adapter, else the kernel's controller that failed its set-up, else
    /// the configured name.
    private func controllerName(adapter: String?) -> String? {
        adapter ?? initCheck.failed?.name ?? config.bluez.adapter
    }

    private func radioBlock(adapter: String?) -> RadioBlock {
        guard let name = controllerName(adapter: adapter), let entry = switches.bluetoothSwitch(named: name) else {
            return .none
        }
        return entry.hardBlocked ? .hard : entry.softBlocked ? .soft : .none
    }

    /// Opens `/dev/rfkill` for its events (at open it lists every switch).
    /// Without it (a container, no read access) blocks still show as the
    /// adapter powered off; says once, at debug level, why.
    private func openRfkill() {
        guard let rfkillSource else { return }
        switch RfkillDevice.openEvents(path: rfkillSource.device) {
        case .success(let device):
            rfkill = device
            rfkillWatch = loop.watch(device.descriptor, interest: .readable) { [unowned self] _ in readRfkill() }
            readRfkill()
        case .failure(let failure):
            report.logger.debug("rfkill blocks not followed: \(failure)")
        }
    }

    private func closeRfkill() {
        if let rfkillWatch { loop.removeWatch(rfkillWatch) }
        rfkillWatch = nil
        rfkill?.close()
        rfkill = nil
    }

    private func readRfkill() {
        guard let device = rfkill else { return }
        var changed = false
        for event in device.readEvents() {
            changed = switches.apply(event) { RfkillDevice.name(ofSwitch: $0, sysfs: rfkillSource?.sysfs ?? "") } || changed
        }
        if let failure = device.failure {
            report.logger.warning("rfkill blocks no longer followed: \(failure)")
            closeRfkill()
        }
        guard changed else { return }
        let block = radioBlock(adapter: resolution.adapter?.interfaceName)
        metrics?.radioBlock(block)
        kernelViewChanged()
    }

    /// The `rfkill-unblock` step: clears the soft block of `controller`'s switch.
    private func unblockRadio(_ controller: String) -> Result<Void, LinkFailure> {
        guard let rfkillSource, rfkill != nil else { return .failure(LinkFailure(.fatal, "rfkill is not followed")) }
        guard let entry = switches.bluetoothSwitch(named: controller) else {
            return .failure(LinkFailure(.transient, "\(controller) has no rfkill switch"))
        }
        if entry.hardBlocked { return .failure(LinkFailure(.fatal, "\(controller) is blocked by a hardware switch")) }
        guard entry.softBlocked else { return .success(()) }
        return RfkillDevice.setSoftBlock(index: entry.index, blocked: false, path: rfkillSource.device)
            .mapError { LinkFailure(.fatal, $0.description) }
    }

    // MARK: A controller that never came up

    /// While bluetoothd is there but no adapter is found, looks at the
    /// kernel's controllers (now, then with a growing delay); stops once one is.
    private func updateControllerCheck() {
        if bluezPresent, resolution.adapter == nil {
            if initCheckTimer == nil { checkControllers() }
            return
        }
        if let initCheckTimer { loop.cancelTimer(initCheckTimer) }
        initCheckTimer = nil
        if let change = initCheck.reset() { controllerCheckChanged(change) }
    }

    private func checkControllers() {
        initCheckTimer = nil
        let listed = Set(tree.adapters.map(\.interfaceName))
        if let change = initCheck.check(kernel: KernelControllers.list(), listed: listed, at: start.duration(to: .now)) {
            controllerCheckChanged(change)
        }
        initCheckTimer = loop.schedule(after: initCheck.nextDelay) { [unowned self] in checkControllers() }
    }

    private func controllerCheckChanged(_ change: ControllerInitCheck.Change) {
        switch change {
        case .failed(let controller):
            report.logger.error(
                "\(ControllerInitCheck.problem(controller))",
                metadata: ["event": "controller-init-failed", "controller": "\(controller.name)"]
            )
        case .cleared(let controller):
            report.logger.notice(
                "\(controller.name) no longer looks like a controller that failed its initialisation",
                metadata: ["event": "controller-init-cleared", "controller": "\(controller.name)"]
            )
        }
        metrics?.controllerInitFailed(initCheck.failed != nil)
        kernelViewChanged()
    }

    /// What status shows of an adapter problem only the kernel sees.
    private func updateAdapterProblem() {
        let problem: String?
        switch resolution.observation.radioBlock {
        case .hard:
            problem = "\(controllerName(adapter: resolution.adapter?.interfaceName) ?? "the controller") is blocked by a hardware switch (rfkill); waiting for it to lift"
        case .soft:
            problem = "\(controllerName(adapter: resolution.adapter?.interfaceName) ?? "the controller") is blocked by rfkill (soft block)"
                + (config.reconnect.escalate.contains(.rfkillUnblock) ? "; Tether unblocks it (rfkill-unblock)" : "; \"rfkill unblock bluetooth\" clears it")
        case .none:
            problem = initCheck.failed.map(ControllerInitCheck.problem)
        }
        guard problem != adapterProblem else { return }
        adapterProblem = problem
        shared.withLock { $0.adapterProblem = problem }
        publishIfChanged([])
    }

    /// The supervisor reported a drop: logged now, its reason with it or
    /// after it (`DropAccount`).
    private func dropNoticed(unexpected: Bool) {
        let device = resolution.device?.address ?? config.dongle.address
        carryOut(drops.dropNoticed(
            unexpected: unexpected, address: deviceAddress, device: device, at: start.duration(to: .now),
            source: reasonSource, unavailableWhy: reasonUnavailableWhy))
    }

    /// The kernel or bluetoothd said why the dongle's link dropped.
    private func reasonHeard(_ reason: DisconnectReasons.Reason, address: String) {
        carryOut(drops.reasonHeard(reason, address: address, at: start.duration(to: .now)))
    }

    private func carryOut(_ effects: [DropAccount.Effect]) {
        for effect in effects {
            switch effect {
            case .logDrop(let unexpected, let reason, let source, let why, let device):
                lastDropAt = Date()
                report.disconnected(
                    unexpected: unexpected, reason: reason?.rawValue, toFollowFrom: source, why: why, state: supervisor.state,
                    device: device)
            case .logReason(let reason, let why, _, let device):
                // The drop awaiting its reason is the last one logged.
                report.dropReason(reason.rawValue, why: why, droppedAt: lastDropAt ?? Date(), state: supervisor.state, device: device)
            case .count(let reason):
                metrics?.disconnected(reason: reason)
                let at = lastDropAt ?? Date()
                shared.withLock { s in
                    s.lastDisconnectReason = reason.rawValue
                    s.lastDisconnectAt = at
                }
            case .startWait(let wait):
                if let dropWait { loop.cancelTimer(dropWait) }
                dropWait = loop.schedule(after: wait) { [unowned self] in
                    dropWait = nil
                    carryOut(drops.waitEnded())
                }
            case .cancelWait:
                if let dropWait { loop.cancelTimer(dropWait) }
                dropWait = nil
            }
        }
    }

    // MARK: The supervisor

    /// Hands `event` to the supervisor and carries out its actions. An event
    /// raised while that happens (a reply that completed at once) waits its
    /// turn, so actions are performed in the order they were decided.
    private func deliver(_ event: SupervisorEvent) {
        queuedEvents.append(event)
        guard !handlingEvent else { return }
        handlingEvent = true
        defer { handlingEvent = false }
        processQueuedEvents()
    }

    /// Events raised while one was handled, in the order they came.
    private func processQueuedEvents() {
        var index = 0
        while index < queuedEvents.count {
            process(queuedEvents[index])
            index += 1
        }
        queuedEvents.removeAll(keepingCapacity: true)
    }

    /// A loop turn carried notifications. Online, that only moves the
    /// supervisor's last-data mark: no action and no change of status, so
    /// the bookkeeping of `process` (metrics, the shared status, publishing)
    /// is skipped; it is once per turn, up to a thousand times a second, and
    /// cost about 1.5 µs per reading at 2,000/s (`make bench`).
    private func dataArrived() {
        guard !handlingEvent, queuedEvents.isEmpty, supervisor.state == .online else {
            return deliver(.dataReceived)
        }
        let now = start.duration(to: .now)
        let actions = supervisor.handle(.dataReceived, at: now)
        guard !actions.isEmpty || supervisor.state != .online else { return }
        handlingEvent = true
        defer { handlingEvent = false }
        carryOut(actions, of: .dataReceived, at: now)
        processQueuedEvents()
    }

    private func process(_ event: SupervisorEvent) {
        let now = start.duration(to: .now)
        carryOut(supervisor.handle(event, at: now), of: event, at: now)
        followLinkWithManagementSocket()
    }

    /// The kernel's management socket carries every controller's Device
    /// Found events as well as the Device Disconnected ones it is read for:
    /// one per advertising report of every device while discovery runs,
    /// hundreds a second in a busy street (`make e2e`'s busy-street: four
    /// times the idle CPU while away). So it is open only while a link is
    /// made or held, and closed while the dongle is away, searched for or
    /// cooled down from (each entered long after a link's end, whose reason
    /// has arrived by then). An open that failed is not tried again.
    private func followLinkWithManagementSocket() {
        guard kernelReasons, managementUsable else { return }
        switch supervisor.state {
        case .away, .searching, .coolingDown:
            guard management != nil else { return }
            readManagementEvents()  // a reason already queued is not lost
            closeManagementSocket()
        default:
            if management == nil { openManagementSocket() }
        }
    }

    /// Records what the supervisor decided on `event` and performs it, in order.
    ///
    /// After the keep-alive's own steps (`Supervisor.leavesStatusAsItWas`:
    /// most of an idle daemon's steps) the supervisor's status is as it was.
    /// So unless the resolution changed too, the status is not built, stored
    /// or compared: that bookkeeping copied the supervisor twice per step.
    private func carryOut(_ actions: [SupervisorAction], of event: SupervisorEvent, at now: Duration) {
        metrics?.observe(event, actions: actions, at: now)
        if resolutionChangedSincePublish || !Supervisor.leavesStatusAsItWas(event, deciding: actions) {
            let status = supervisor.status
            metrics?.observe(status, at: now)
            shared.withLock { s in
                s.supervisor = status
                if let since = status.awaySince {
                    if s.awaySince == nil { s.awaySince = Date(timeIntervalSinceNow: -Double((now - since).components.seconds)) }
                } else {
                    s.awaySince = nil
                }
                if status.state == .online {
                    if s.connectedSince == nil { s.connectedSince = Date() }
                } else {
                    s.connectedSince = nil
                }
            }
            publishIfChanged(actions, status: status)
        }
        for action in actions {
            switch action {
            case .startTimer(let timer, let delay):
                timers.start(timer, after: delay) { [unowned self] fired in deliver(.timerFired(fired)) }
            case .cancelTimer(let timer):
                timers.cancel(timer)
            case .transition(let from, let to, let cause):
                report.transition(from: from, to: to, cause: cause, device: resolution.device?.address ?? config.dongle.address)
            case .report(.disconnected(let unexpected)):
                dropNoticed(unexpected: unexpected)
            case .report(let item):
                if case .connected = item, let address = resolution.device?.address {
                    dongleSeen()
                    bindOnFirstLink(to: address)
                }
                report.report(item, state: supervisor.state, device: resolution.device?.address, missing: lane.missingCharacteristics(), at: now)
            case .answerReconnect(.started(let attempt)):
                requests.answerAll(.started(attempt: attempt))
            case .answerReconnect(.notReady(let why)):
                requests.answerAll(.notReady(why))
            case .subscribe:
                // A socket from an earlier subscribe that has not seen its
                // end yet would make AcquireNotify say "Notify acquired".
                closeNotifyReaders()
                lane.perform(action)
            case .escalate(let step) where step == .rfkillUnblock || step.reprobesController:
                guard let controller = controllerName(adapter: resolution.adapter?.interfaceName) else {
                    deliver(.escalationFinished(step, .failure(LinkFailure(.transient, "no controller"))))
                    continue
                }
                report.logger.warning(
                    "escalating: \(step.rawValue) on \(controller)", metadata: ["event": "escalation", "step": "\(step.rawValue)"]
                )
                lane.perform(action)  // marks the step in flight
                if step == .rfkillUnblock {
                    lane.escalationStepDone(step, unblockRadio(controller))
                } else {
                    blockingInput.yield(.usb(step, controller: controller))
                }
            case .checkController:
                guard let adapter = resolution.adapter else {
                    deliver(.controllerChecked(.unknown("no adapter")))
                    continue
                }
                blockingInput.yield(.checkController(adapter.interfaceName))
            case .escalate(.hciReset):
                guard let adapter = resolution.adapter else {
                    deliver(.escalationFinished(.hciReset, .failure(LinkFailure(.transient, "no adapter"))))
                    continue
                }
                report.logger.warning("escalating: hci-reset on \(adapter.interfaceName)", metadata: ["event": "escalation"])
                lane.perform(action)  // marks the step in flight; its result comes from the blocking job
                blockingInput.yield(.hciReset(adapter.interfaceName))
            default:
                lane.perform(action)
            }
        }
    }

    /// The part of the status whose changes are announced (PropertiesChanged,
    /// STATUS=); readings counters change too often and are read on demand.
    private struct PublishedFields: Equatable {
        var supervisor: Supervisor.Status
        var device: String?
        var adapter: String?
        /// Whether any reading was written since start ("no reading yet").
        var anyReading: Bool
        var adapterProblem: String?
        var bootloader: String?
    }

    /// `status`: the supervisor's, if the caller has it at hand.
    private func publishIfChanged(_ actions: [SupervisorAction], status supervisorStatus: Supervisor.Status? = nil) {
        let supervisorStatus = supervisorStatus ?? supervisor.status
        guard supervisorStatus != published?.supervisor || resolutionChangedSincePublish
            || anyReadingWritten != published?.anyReading || adapterProblem != published?.adapterProblem
        else { return }
        resolutionChangedSincePublish = false
        let current = PublishedFields(
            supervisor: supervisorStatus, device: resolution.device?.address ?? config.dongle.address,
            adapter: resolution.adapter?.interfaceName, anyReading: anyReadingWritten, adapterProblem: adapterProblem,
            bootloader: identity.bootloader
        )
        guard current != published else { return }
        published = current
        var transition: (from: SupervisorState, to: SupervisorState, cause: String)?
        for case .transition(let from, let to, let cause) in actions { transition = (from, to, cause) }
        changeInput.yield(LinkStatusChange(status: status, transition: transition))
    }

    // MARK: Blocking work, off the loop

    private enum BlockingJob: Sendable {
        case hciReset(String)
        /// `usb-reset` or `usb-rebind` on the controller named.
        case usb(EscalationStep, controller: String)
        /// Whether the controller named answers a command of its own.
        case checkController(String)
    }

    /// The controller's answer to a version request comes in milliseconds;
    /// the kernel gives up on an unanswered command after 2 s
    /// (HCI_CMD_TIMEOUT), so 5 s leaves room for one queued before ours.
    static let controllerCheckTimeout: Duration = .seconds(5)

    /// A child task on `blockingWork`: an HCI reset and a USB reset or
    /// rebind are calls that can block for seconds, which the loop must never do.
    private func runBlockingJobs() async {
        for await job in blockingJobs {
            switch job {
            case .hciReset(let name):
                let result = HCIReset.run(name)
                loop.execute { [self] in lane.escalationStepDone(.hciReset, result) }
            case .usb(let step, let controller):
                let result = USBRecovery.run(step, controller: controller)
                loop.execute { [self] in lane.escalationStepDone(step, result) }
            case .checkController(let name):
                let check: ControllerCheck
                switch HCIController.askVersion(name, timeout: Self.controllerCheckTimeout) {
                case .answered: check = .responsive
                case .silent: check = .unresponsive("\(name) did not answer HCI Read Local Version within \(Self.controllerCheckTimeout.roundedText)")
                case .notAsked(let why): check = .unknown(why)
                }
                loop.execute { [self] in
                    if case .unknown(let why) = check { report.logger.debug("controller check: \(why)") }
                    deliver(.controllerChecked(check))
                }
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
