import BlueZ
import DBus
import Foundation
import HCI
import Logging
import Synchronization
import TetherCore

/// Runs the supervisor against bluetoothd: the adapter layer between the
/// pure `Supervisor` and the world.
///
/// Two tasks cooperate:
/// - the *event pump* applies bluetoothd's signals to a mirror of its object
///   tree, hands notifications straight to the readings recorder, and tells
///   the supervisor when the observation changes;
/// - the *supervisor loop* feeds the supervisor its events and carries out its
///   actions: BlueZ calls run as child tasks that report back, timers are
///   sleeping tasks on the monotonic clock.
/// Readings never pass through the supervisor loop, so a flood of
/// notifications or a slow disk cannot delay a keep-alive poll.
public final class LinkService<C: Clock>: Sendable where C.Duration == Duration {
    public typealias Status = LinkStatus

    private enum Input: Sendable {
        case event(SupervisorEvent)
        case timer(SupervisorTimer, generation: Int)
        /// `reconnect()`: handled like `.reconnectRequested`, then answered
        /// once an attempt starts or `limit` passes.
        case reconnect(id: Int, limit: Duration)
        case reconnectDeadline(id: Int)
        /// The watchdog's question "is the loop turning?"; answered by calling it.
        case ping(@Sendable () -> Void)
    }

    private struct Shared {
        var resolution = LinkResolver.Resolution()
        var supervisor = Supervisor.Status()
        var connectedSince: Date?
        var lastReadingAt: Date?
        /// Callers of `reconnect()` waiting for their answer, by request id.
        var reconnectWaiters: [Int: CheckedContinuation<ReconnectOutcome, Never>] = [:]
        var nextRequest = 0
        var stopped = false
    }

    private let config: TetherConfig
    private let client: BlueZClient
    private let recorder: ReadingRecorder
    private let logger: Logger
    private let clock: C
    private let start: C.Instant
    private let resolver: LinkResolver
    private let inputs: AsyncStream<Input>
    private let input: AsyncStream<Input>.Continuation
    private let shared = Mutex(Shared())
    private let seed: UInt64
    private let changeInput: AsyncStream<LinkStatusChange>.Continuation

    /// Every change of state, attempt, error or schedule, newest kept if the
    /// consumer (control API, sd_notify) falls behind. One consumer.
    public let changes: AsyncStream<LinkStatusChange>

    public init(
        config: TetherConfig, bus: Bus, recorder: ReadingRecorder, logger: Logger, clock: C,
        seed: UInt64 = UInt64.random(in: .min ... .max)
    ) {
        self.config = config
        client = BlueZClient(bus: bus)
        self.recorder = recorder
        self.logger = logger
        self.clock = clock
        start = clock.now
        resolver = LinkResolver(config: config)
        (inputs, input) = AsyncStream.makeStream(of: Input.self, bufferingPolicy: .unbounded)
        (changes, changeInput) = AsyncStream.makeStream(of: LinkStatusChange.self, bufferingPolicy: .bufferingNewest(32))
        self.seed = seed
    }

    /// Runs until the task is cancelled or the bus connection closes.
    public func run() async throws(BlueZError) {
        let events = try await client.events()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.pump(events) }
            group.addTask { await self.supervise() }
            // Either ending (cancellation, or the bus going away) ends both.
            _ = await group.next()
            group.cancelAll()
        }
        input.finish()
        changeInput.finish()
        let waiters = shared.withLock { s in
            s.stopped = true
            defer { s.reconnectWaiters = [:] }
            return s.reconnectWaiters.values
        }
        for waiter in waiters { waiter.resume(returning: .notReady("the daemon is stopping")) }
    }

    /// Drops the link (if any) and starts a fresh retry window, as `tether
    /// reconnect` asks. Returns once a connect attempt has started, when
    /// there is nothing to connect with, or after `limit` (an escalation
    /// step can hold the attempt back for several seconds).
    public func reconnect(waitingUpTo limit: Duration = .seconds(20)) async -> ReconnectOutcome {
        await withCheckedContinuation { continuation in
            let id: Int? = shared.withLock { s in
                guard !s.stopped else { return nil }
                s.nextRequest += 1
                s.reconnectWaiters[s.nextRequest] = continuation
                return s.nextRequest
            }
            guard let id else { return continuation.resume(returning: .notReady("the daemon is stopping")) }
            if case .terminated = input.yield(.reconnect(id: id, limit: limit)) {
                answer(id, .notReady("the daemon is stopping"))
            }
        }
    }

    /// Calls `reply` from the supervisor loop, between two events: if it is
    /// not called, the loop is stuck (the watchdog then stops petting systemd).
    public func ping(_ reply: @escaping @Sendable () -> Void) {
        input.yield(.ping(reply))
    }

    private func answer(_ id: Int, _ outcome: ReconnectOutcome) {
        shared.withLock { $0.reconnectWaiters.removeValue(forKey: id) }?.resume(returning: outcome)
    }

    public var status: Status {
        let stats = recorder.stats
        return shared.withLock { s in
            let next = s.supervisor.nextAttemptAt.map { max(.zero, $0 - (start.duration(to: clock.now))) }
            return Status(
                state: s.supervisor.state, device: s.resolution.device?.address ?? config.dongle.address,
                adapter: s.resolution.adapter?.interfaceName, connectedSince: s.connectedSince,
                lastReadingAt: s.lastReadingAt, readingsWritten: stats.written, reconnects: s.supervisor.reconnects,
                windowAttempt: s.supervisor.windowAttempt, nextAttemptIn: next, lastError: s.supervisor.lastError
            )
        }
    }

    // MARK: Event pump

    private func pump(_ events: BlueZEvents) async {
        var tree = ObjectTree()
        var bluezPresent = false
        var lastObservation: LinkObservation?
        var notifyPaths: [ObjectPath: String] = [:]
        var device = config.dongle.address ?? ""
        var lastResolution = LinkResolver.Resolution()

        func record(_ path: ObjectPath, _ bytes: [UInt8]) {
            guard let uuid = notifyPaths[path] else { return }
            let now = Date()
            recorder.record(Reading(receivedAt: now, device: device, characteristic: uuid, source: .notify, payload: bytes))
            shared.withLock { $0.lastReadingAt = now }
        }

        for await event in events {
            if case .valueChanged(let path, let bytes) = event {
                // The hot path: one dictionary lookup and a hand-off.
                record(path, bytes)
                continue
            }
            switch event {
            case .propertiesChanged(let path, BlueZ.gattCharacteristicInterface, let changed, _):
                // bluetoothd flushes a notification's Value together with any
                // property change still pending on the object (Notifying=true
                // right after StartNotify): a reading all the same.
                if let bytes = changed["Value"]?.bytes { record(path, bytes) }
            case .serviceAppeared(let owner, _):
                bluezPresent = true
                logger.debug("bluetoothd is on the bus", metadata: ["owner": "\(owner)"])
            case .serviceVanished:
                bluezPresent = false
            case .signalsLost(let count):
                logger.error(
                    "fell behind bluetoothd: \(count) signals dropped, readings among them; state re-read",
                    metadata: ["event": "reading-gap", "count": "\(count)"]
                )
            default:
                break
            }
            tree.apply(event)
            // In a crowded place discovery reports many other devices; their
            // RSSI updates cannot change which adapter, dongle or
            // characteristics we use, so they skip the re-resolution.
            if case .propertiesChanged(let path, BlueZ.deviceInterface, _, _) = event,
               let known = lastResolution.device?.path, path != known
            {
                continue
            }
            let resolution = resolver.resolve(tree, bluezPresent: bluezPresent)
            lastResolution = resolution
            notifyPaths = Dictionary(resolution.notify.map { ($0.path, $0.uuid) }, uniquingKeysWith: { a, _ in a })
            if let address = resolution.device?.address { device = address }
            shared.withLock { $0.resolution = resolution }
            if resolution.observation != lastObservation {
                lastObservation = resolution.observation
                input.yield(.event(.observed(resolution.observation)))
            }
            if isAdvertisement(event, device: resolution.device?.path) {
                input.yield(.event(.advertising))
            }
        }
    }

    /// An RSSI update (or a newly found device object with one) is the sign
    /// that discovery saw the dongle advertise.
    private func isAdvertisement(_ event: BlueZEvent, device: ObjectPath?) -> Bool {
        guard let device else { return false }
        switch event {
        case .propertiesChanged(let path, let interface, let changed, _):
            return path == device && interface == BlueZ.deviceInterface && changed["RSSI"] != nil
        case .interfacesAdded(let path, let interfaces):
            return path == device
                && interfaces.stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary?["RSSI"] != nil
        default:
            return false
        }
    }

    // MARK: Supervisor loop

    private func supervise() async {
        var supervisor = Supervisor(settings: Supervisor.Settings(config: config), seed: seed)
        // Discovery start and stop must reach bluetoothd in the order they
        // were decided; each waits for the one before.
        var discoveryLane: Task<Void, Never>?
        var timers: [SupervisorTimer: (generation: Int, task: Task<Void, Never>)] = [:]
        var generation = 0
        defer { for (_, timer) in timers { timer.task.cancel() } }

        // Reconnect requests waiting for their attempt to start, with their deadline tasks.
        var awaitingAttempt: [Int: Task<Void, Never>] = [:]
        var published: PublishedFields?
        defer { for (_, deadline) in awaitingAttempt { deadline.cancel() } }

        for await item in inputs {
            let event: SupervisorEvent
            var reconnectRequest: (id: Int, limit: Duration)?
            switch item {
            case .event(let e):
                event = e
            case .timer(let timer, let fired):
                // A timer restarted after this one fired is not this one.
                guard timers[timer]?.generation == fired else { continue }
                timers[timer] = nil
                event = .timerFired(timer)
            case .reconnect(let id, let limit):
                switch supervisor.state {
                case .waitingForBluez:
                    answer(id, .notReady("bluetoothd is not running"))
                    continue
                case .waitingForAdapter:
                    let adapter = shared.withLock { $0.resolution.adapter?.interfaceName }
                    answer(id, .notReady(adapter.map { "the adapter \($0) is powered off" } ?? "no Bluetooth adapter"))
                    continue
                default:
                    event = .reconnectRequested
                    reconnectRequest = (id, limit)
                }
            case .reconnectDeadline(let id):
                awaitingAttempt[id] = nil
                answer(id, .pending(supervisor.state))
                continue
            case .ping(let reply):
                reply()
                continue
            }
            let now = start.duration(to: clock.now)
            let actions = supervisor.handle(event, at: now)
            let status = supervisor.status
            shared.withLock { s in
                s.supervisor = status
                if status.state == .online {
                    if s.connectedSince == nil { s.connectedSince = Date() }
                } else {
                    s.connectedSince = nil
                }
            }
            if let request = reconnectRequest {
                let deadline = Task { [clock, input] in
                    do {
                        try await clock.sleep(for: request.limit)
                        input.yield(.reconnectDeadline(id: request.id))
                    } catch {}
                }
                awaitingAttempt[request.id] = deadline
            }
            if !awaitingAttempt.isEmpty {
                let outcome: ReconnectOutcome? =
                    if actions.contains(where: { if case .connect = $0 { true } else { false } }) {
                        .started(attempt: status.windowAttempt)
                    } else if status.state == .waitingForBluez || status.state == .waitingForAdapter {
                        .notReady(status.state == .waitingForBluez ? "bluetoothd went away" : "the adapter went away or was powered off")
                    } else {
                        nil
                    }
                if let outcome {
                    for (id, deadline) in awaitingAttempt {
                        deadline.cancel()
                        answer(id, outcome)
                    }
                    awaitingAttempt = [:]
                }
            }
            publishIfChanged(&published, actions: actions)
            for action in actions {
                switch action {
                case .startTimer(let timer, let delay):
                    timers[timer]?.task.cancel()
                    generation += 1
                    let mine = generation
                    let deadline = clock.now.advanced(by: delay)
                    let task = Task { [clock, input] in
                        do {
                            try await clock.sleep(until: deadline, tolerance: nil)
                            input.yield(.timer(timer, generation: mine))
                        } catch {}
                    }
                    timers[timer] = (mine, task)
                case .cancelTimer(let timer):
                    timers.removeValue(forKey: timer)?.task.cancel()
                case .startDiscovery, .stopDiscovery:
                    let previous = discoveryLane
                    discoveryLane = Task {
                        await previous?.value
                        await self.discovery(start: action == .startDiscovery)
                    }
                default:
                    perform(action)
                }
            }
        }
    }

    /// The part of the status whose changes are announced (PropertiesChanged,
    /// STATUS=); readings counters change too often and are read on demand.
    private struct PublishedFields: Equatable {
        var supervisor: Supervisor.Status
        var device: String?
        var adapter: String?
    }

    private func publishIfChanged(_ published: inout PublishedFields?, actions: [SupervisorAction]) {
        let current = shared.withLock { s in
            PublishedFields(
                supervisor: s.supervisor, device: s.resolution.device?.address ?? config.dongle.address,
                adapter: s.resolution.adapter?.interfaceName
            )
        }
        guard current != published else { return }
        published = current
        var transition: (from: SupervisorState, to: SupervisorState, cause: String)?
        for case .transition(let from, let to, let cause) in actions { transition = (from, to, cause) }
        changeInput.yield(LinkStatusChange(status: status, transition: transition))
    }

    private func perform(_ action: SupervisorAction) {
        let resolution = shared.withLock { $0.resolution }
        switch action {
        case .transition(let from, let to, let cause):
            var metadata: Logger.Metadata = ["state": "\(to.rawValue)", "event": "state-changed"]
            if let device = resolution.device?.address ?? config.dongle.address { metadata["device"] = "\(device)" }
            logger.info("\(from.rawValue) → \(to.rawValue): \(cause)", metadata: metadata)
        case .report(let report):
            log(report, device: resolution.device?.address)
        case .connect(let id, let timeout):
            guard let device = resolution.device?.path else {
                return finish(.connectFinished(attempt: id, .failure(LinkFailure(.transient, "the dongle is not known"))))
            }
            Task {
                do throws(BlueZError) {
                    // A little longer than the supervisor's own deadline, which
                    // cancels the attempt properly (Disconnect) when it fires.
                    try await client.connect(device, timeout: timeout + .seconds(1))
                    finish(.connectFinished(attempt: id, .success(())))
                } catch {
                    finish(.connectFinished(attempt: id, .failure(Self.failure(error))))
                }
            }
        case .disconnect:
            guard let device = resolution.device?.path else { return }
            Task {
                do { try await client.disconnect(device) } catch {
                    logger.debug("Disconnect: \(error)")
                }
            }
        case .subscribe(let id):
            let characteristics = resolution.notify
            Task {
                do throws(BlueZError) {
                    for characteristic in characteristics {
                        do throws(BlueZError) {
                            try await client.startNotify(characteristic.path)
                        } catch where error.name == BlueZ.ErrorName.inProgress {
                            // Our own earlier StartNotify is still being served.
                        }
                    }
                    finish(.subscribeFinished(attempt: id, .success(())))
                } catch {
                    finish(.subscribeFinished(attempt: id, .failure(Self.failure(error))))
                }
            }
        case .poll(let id, let timeout):
            guard let characteristic = resolution.keepalive, let device = resolution.device else {
                return finish(.pollFinished(poll: id, .failure(LinkFailure(.transient, "keep-alive characteristic not found"))))
            }
            Task { await poll(id, characteristic: characteristic, device: device, timeout: timeout) }
        case .powerOn:
            guard let adapter = resolution.adapter?.path else { return }
            Task {
                do throws(BlueZError) {
                    try await client.setPowered(adapter, true)
                } catch {
                    logger.error("cannot power the adapter on: \(error)", metadata: ["error": "\(error)"])
                }
            }
        case .startDiscovery, .stopDiscovery:
            break  // serialized by the loop
        case .escalate(let step):
            guard let adapter = resolution.adapter else {
                return finish(.escalationFinished(step, .failure(LinkFailure(.transient, "no adapter"))))
            }
            Task { finish(.escalationFinished(step, await escalate(step, adapter: adapter))) }
        case .startTimer, .cancelTimer:
            break  // handled by the loop
        }
    }

    private func discovery(start: Bool) async {
        guard let adapter = shared.withLock({ $0.resolution.adapter?.path }) else {
            if start { finish(.discoveryFailed(LinkFailure(.transient, "no adapter"))) }
            return
        }
        do throws(BlueZError) {
            if start {
                let uuids = config.dongle.serviceUUID.map { [$0] } ?? []
                try await client.setDiscoveryFilter(adapter, uuids: uuids)
                try await client.startDiscovery(adapter)
            } else {
                try await client.stopDiscovery(adapter)
            }
        } catch where start && error.name == BlueZ.ErrorName.inProgress {
            // Already discovering for us.
        } catch {
            if start {
                finish(.discoveryFailed(Self.failure(error)))
            } else {
                logger.debug("StopDiscovery: \(error)")
            }
        }
    }

    private func poll(_ id: Int, characteristic: GattCharacteristic, device: Device, timeout: Duration) async {
        do throws(BlueZError) {
            if let bytes = config.keepalive.write {
                let type: WriteType = config.keepalive.writeType == .command ? .command : .request
                try await client.writeValue(characteristic.path, bytes, type: type, timeout: timeout)
            } else {
                let value = try await client.readValue(characteristic.path, timeout: timeout)
                let now = Date()
                recorder.record(Reading(receivedAt: now, device: device.address, characteristic: characteristic.uuid, source: .read, payload: value))
                shared.withLock { $0.lastReadingAt = now }
            }
            finish(.pollFinished(poll: id, .success(())))
        } catch {
            finish(.pollFinished(poll: id, .failure(Self.failure(error))))
        }
    }

    private func escalate(_ step: EscalationStep, adapter: Adapter) async -> Result<Void, LinkFailure> {
        logger.warning("escalating: \(step.rawValue) on \(adapter.interfaceName)", metadata: ["event": "escalation"])
        var result: Result<Void, LinkFailure>
        switch step {
        case .powerCycle:
            do throws(BlueZError) {
                try await client.setPowered(adapter.path, false)
                try? await clock.sleep(for: .milliseconds(500))
                result = .success(())
            } catch {
                result = .failure(Self.failure(error))
            }
            // Whatever happened, the adapter must end up on: a wedged
            // controller is why we are here, so try more than once.
            for attempt in 1...3 {
                do throws(BlueZError) {
                    try await client.setPowered(adapter.path, true)
                    break
                } catch {
                    result = .failure(Self.failure(error))
                    if attempt < 3 { try? await clock.sleep(for: .seconds(1)) }
                }
            }
        case .hciReset:
            let name = adapter.interfaceName
            result = await Task.detached { HCIController.reset(name) }.value.mapError { LinkFailure(.fatal, $0.description) }
        }
        // Report only once bluetoothd shows the adapter powered again (or
        // clearly not), so the supervisor judges the result, not a race.
        let deadline = clock.now.advanced(by: .seconds(10))
        while clock.now < deadline, !Task.isCancelled {
            if shared.withLock({ $0.resolution.observation.adapterPowered }) { break }
            try? await clock.sleep(for: .milliseconds(100))
        }
        return result
    }

    /// The configured characteristics the connected dongle does not export,
    /// to explain an attempt that timed out waiting for services.
    private func missingCharacteristics() -> [String]? {
        let resolution = shared.withLock { $0.resolution }
        guard resolution.observation.servicesResolved, !resolution.observation.characteristicsReady else { return nil }
        var missing = config.dongle.notify.filter { uuid in !resolution.notify.contains { $0.uuid == uuid } }
        if config.keepalive.enabled, resolution.keepalive == nil {
            missing.append(config.keepalive.characteristic)
        }
        return missing
    }

    private func finish(_ event: SupervisorEvent) {
        input.yield(.event(event))
    }

    private static func failure(_ error: BlueZError) -> LinkFailure {
        let kind: LinkFailure.Kind = switch error.disposition {
        case .transient: .transient
        case .needsCancel: .needsCancel
        case .fatal: .fatal
        }
        return LinkFailure(kind, error.description)
    }

    private func log(_ report: SupervisorReport, device: String?) {
        // journald gets these as TETHER_EVENT, TETHER_STATE, TETHER_DEVICE,
        // so `journalctl TETHER_EVENT=disconnected` finds every drop.
        var metadata: Logger.Metadata = [
            "event": "\(report.eventName)", "state": "\(shared.withLock { $0.supervisor.state.rawValue })",
        ]
        if let device { metadata["device"] = "\(device)" }
        switch report {
        case .connected(let attempt):
            logger.notice("online\(device.map { " with \($0)" } ?? "")", metadata: metadata.merging(["attempt": "\(attempt)"]) { $1 })
        case .disconnected(let unexpected):
            if unexpected {
                logger.warning("link lost", metadata: metadata)
            } else {
                logger.info("disconnected", metadata: metadata)
            }
        case .reconnectAttempt(let attempt, let blind):
            logger.info("\(blind ? "blind " : "")connect attempt \(attempt)", metadata: metadata.merging(["attempt": "\(attempt)"]) { $1 })
        case .attemptFailed(let attempt, var error):
            if let missing = missingCharacteristics(), !missing.isEmpty {
                error += " (not found on the dongle: \(missing.joined(separator: ", ")))"
            }
            logger.warning("attempt \(attempt) failed: \(error)", metadata: metadata.merging(["attempt": "\(attempt)", "error": "\(error)"]) { $1 })
        case .windowExhausted(let attempts):
            logger.error("retry window exhausted after \(attempts) attempts", metadata: metadata.merging(["attempt": "\(attempts)"]) { $1 })
        case .escalation(let step, let outcome):
            logger.warning("\(step.rawValue): \(outcome)", metadata: metadata)
        case .bluezVanished:
            logger.warning("bluetoothd went away", metadata: metadata)
        case .bluezAppeared:
            logger.notice("bluetoothd is back", metadata: metadata)
        case .adapterUnavailable:
            logger.warning("adapter unavailable: waiting for it to be powered", metadata: metadata)
        case .discoveryFailed(let error):
            logger.warning("discovery failed: \(error); retrying", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        case .adapterLeftOff:
            logger.error("the adapter is still off after an escalation; powering it on again", metadata: metadata)
        case .linkCheckFailed(let consecutive, let error):
            logger.warning("keep-alive poll failed (\(consecutive) in a row): \(error)", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
    }
}
