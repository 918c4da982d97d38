import BlueZ
import Configuration
import DBus
import EventLoop
import FoundationEssentials
import LinkCore
import LinkPolicy
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import HCI
import LinkSupervisor
import Logging
import Readings

/// Carries out the supervisor's BlueZ actions, in the order it decided them.
///
/// Each action is put on the bus the moment it is performed (a libdbus send,
/// not a task), so requests reach bluetoothd in decision order by
/// construction: the socket is written in order and bluetoothd serves one
/// client's calls in order. Waiting is for replies only, which come back on
/// the loop and are turned into supervisor events through `finish`. A slow
/// call (a 20 s Connect) therefore holds nothing up.
///
/// One exception: nothing goes out while a StopDiscovery is unanswered.
/// bluetoothd 5.66 queues the management command that stops the scan and
/// serves the next call at once; a Connect then makes the kernel stop the
/// scan itself, the queued command is rejected, and bluetoothd keeps
/// `Discovering` true with no scan running: every later StartDiscovery is
/// answered with success and starts nothing ("filters were equal"), so a
/// dongle that comes back is never seen (`make e2e`'s `parked`, once in
/// three clean-clone runs). Actions decided meanwhile wait, in order, for
/// its reply (milliseconds).
///
/// Threading: confined to the loop; `@unchecked Sendable` only so that bus
/// replies, which run on that loop, may capture it.
final class ActionLane: @unchecked Sendable {
    private let client: BlueZClient
    private let loop: EventLoop
    let config: TetherConfig
    let finish: (SupervisorEvent) -> Void
    let logger: Logger
    /// The wall clock a read-mode poll's reading is stamped with.
    let wallClock: @Sendable () -> Date
    /// What bluetoothd's tree resolves to now; set by the service on every change.
    var resolution = LinkResolver.Resolution()
    /// Tether's Agent1, when it pairs: `pair` asks it whether the passkey went out.
    var agent: PairingAgent?
    /// A reading taken by a read-mode keep-alive poll.
    var onReading: ((Reading) -> Void)?
    /// A characteristic's notifications now come through this socket (AcquireNotify).
    var onAcquired: ((GattCharacteristic, AcquiredNotifications) -> Void)?
    /// A call got no reply within its timeout (NoReply): bluetoothd may be
    /// hung, which the service asks bluetoothd itself. Runs before the
    /// call's own completion.
    var onUnanswered: (() -> Void)?
    /// Incremented by `cancelAll`: replies to requests sent before are dropped.
    private var generation = 0
    /// Actions decided while a StopDiscovery is unanswered, in decision
    /// order; nil when none is.
    private var heldForStopDiscovery: [SupervisorAction]?
    /// The escalation step in flight (`EscalationRun`'s rules), and its one timer.
    private var escalation = EscalationRun()
    /// The supervisor's id for the step in flight, which its verdict echoes.
    private var escalationRun = 0
    private var escalationTimer: EventLoop.TimerID?
    /// The keep-alive's call (its write, or its read), marshalled for this
    /// characteristic object.
    private var keepAliveCall: (characteristic: ObjectPath, call: PreparedCall)?

    init(
        client: BlueZClient, loop: EventLoop, config: TetherConfig, logger: Logger,
        wallClock: @escaping @Sendable () -> Date, finish: @escaping (SupervisorEvent) -> Void
    ) {
        self.logger = logger
        self.wallClock = wallClock
        self.client = client
        self.loop = loop
        self.config = config
        self.finish = finish
    }

    /// Stops reporting replies (the service is ending).
    func cancelAll() {
        generation += 1
        heldForStopDiscovery = nil
        carryOut(escalation.cancel())
    }

    /// Sends `request` now; `completion` runs on the loop with its reply,
    /// unless the lane was cancelled meanwhile.
    func send(_ request: BlueZRequest, _ completion: @escaping (Result<[DBusValue], BlueZError>) -> Void) {
        client.send(request, completion: replyHandler(completion))
    }

    /// Sends a prepared call as `send(_:_:)` sends a request.
    private func send(
        _ call: PreparedCall, timeout: Duration, _ completion: @escaping (Result<[DBusValue], BlueZError>) -> Void
    ) {
        client.send(call, timeout: timeout, completion: replyHandler(completion))
    }

    /// `completion` as the bus calls it: dropped once the lane is cancelled,
    /// and after `onUnanswered` when the call got no reply.
    private func replyHandler(_ completion: @escaping (Result<[DBusValue], BlueZError>) -> Void)
        -> @Sendable (Result<[DBusValue], BlueZError>) -> Void
    {
        let sent = generation
        let box = LoopBound(completion)
        return { [weak self] result in
            guard let self, sent == self.generation else { return }
            if case .failure(let error) = result, error.isNoReply { onUnanswered?() }
            box.value(result)
        }
    }

    func perform(_ action: SupervisorAction) {
        // A step the service runs itself (off the bus) is only marked here,
        // and its result may come at once: it is not held.
        if heldForStopDiscovery != nil, !Self.isMarkOnly(action) {
            heldForStopDiscovery?.append(action)
            return
        }
        carryOut(action)
    }

    private static func isMarkOnly(_ action: SupervisorAction) -> Bool {
        if case .escalate(let step, _) = action { return step != .powerCycle }
        return false
    }

    /// The actions held for a StopDiscovery, once it is answered; a second
    /// StopDiscovery among them holds the rest again.
    private func releaseHeldActions() {
        guard var queue = heldForStopDiscovery else { return }
        heldForStopDiscovery = nil
        while !queue.isEmpty {
            carryOut(queue.removeFirst())
            if heldForStopDiscovery != nil {
                heldForStopDiscovery?.append(contentsOf: queue)
                return
            }
        }
    }

    private func carryOut(_ action: SupervisorAction) {
        switch action {
        case .connect(let id, let timeout):
            guard let device = resolution.device?.path else {
                return finish(.connectFinished(attempt: id, .failure(LinkFailure(.transient, "the dongle is not known"))))
            }
            // A little longer than the supervisor's own deadline, which
            // cancels the attempt properly (Disconnect) when it fires.
            send(.connect(device, timeout: timeout + .seconds(1))) { [finish] result in
                finish(.connectFinished(attempt: id, BlueZReplies.connect(result.map { _ in () })))
            }
        case .disconnect:
            guard let device = resolution.device?.path else { return }
            send(.disconnect(device)) { [logger] result in
                if case .failure(let error) = result { logger.debug("Disconnect: \(error)") }
            }
        case .subscribe(let id):
            subscribe(id)
        case .pair(let id, let timeout):
            pair(id, timeout: timeout)
        case .poll(let id, let timeout):
            poll(id, timeout: timeout)
        case .pollWithoutReply:
            pollWithoutReply()
        case .startDiscovery(let id):
            guard let adapter = resolution.adapter?.path else {
                return finish(.discoveryFailed(discovery: id, LinkFailure(.transient, "no adapter")))
            }
            // Both at once: the filter is served first (one client's calls are
            // served in order), and a StopDiscovery decided next cannot
            // overtake the start.
            let uuids = config.dongle.serviceUUID.map { [$0] } ?? []
            send(.setDiscoveryFilter(adapter, uuids: uuids)) { [logger] result in
                if case .failure(let error) = result { logger.warning("SetDiscoveryFilter: \(error); discovering unfiltered") }
            }
            send(.startDiscovery(adapter)) { [weak self, finish] result in
                // The adapter as it is when the answer comes: its signals
                // before the answer are applied before the answer.
                let discovering = self?.resolution.adapter?.discovering ?? false
                if let failure = BlueZReplies.startDiscovery(result.map { _ in () }, adapterDiscovering: discovering) {
                    finish(.discoveryFailed(discovery: id, failure))
                }
            }
        case .stopDiscovery:
            guard let adapter = resolution.adapter?.path else { return }
            heldForStopDiscovery = []
            send(.stopDiscovery(adapter)) { [weak self, logger] result in
                if case .failure(let error) = result { logger.debug("StopDiscovery: \(error)") }
                self?.releaseHeldActions()
            }
        case .powerOn:
            guard let adapter = resolution.adapter?.path else { return }
            send(.setPowered(adapter, true)) { [logger] result in
                if case .failure(let error) = result {
                    logger.error("cannot power the adapter on: \(error)", metadata: ["error": "\(error)"])
                }
            }
        case .escalate(let step, let run):
            escalationRun = run
            escalate(step)
        case .removeDevice(let id):
            guard let adapter = resolution.adapter?.path, let device = resolution.device?.path else {
                return finish(.removeDeviceFinished(removal: id, .failure(LinkFailure(.transient, "the device object is already gone"))))
            }
            send(.removeDevice(adapter: adapter, device: device)) { [finish] result in
                finish(.removeDeviceFinished(removal: id, BlueZReplies.removeDevice(result.map { _ in () })))
            }
        case .startTimer, .cancelTimer, .transition, .report, .answerReconnect, .checkController:
            break  // the service's
        }
    }


    // MARK: Subscribing

    /// Subscribes to every notify characteristic, all requests sent at once
    /// (StartNotify or AcquireNotify, as `dongle.notify_path` says); done
    /// when every reply is in.
    private func subscribe(_ id: Int) {
        let characteristics = resolution.notify
        guard !characteristics.isEmpty else { return finish(.subscribeFinished(attempt: id, .success(()))) }
        var outstanding = characteristics.count
        var failure: LinkFailure?
        let done: (LinkFailure?) -> Void = { [finish] result in
            if let result, failure == nil { failure = result }
            outstanding -= 1
            if outstanding == 0 {
                finish(.subscribeFinished(attempt: id, failure.map { .failure($0) } ?? .success(())))
            }
        }
        for characteristic in characteristics {
            switch config.dongle.notifyPath {
            case .startNotify:
                startNotify(characteristic, done)
            case .acquireNotify:
                guard characteristic.canAcquireNotify else {
                    done(LinkFailure(.fatal, "bluetoothd offers no AcquireNotify for \(characteristic.uuid) (no NotifyAcquired property): set dongle.notify_path to \"start-notify\" or \"auto\""))
                    continue
                }
                acquireNotify(characteristic, fallBack: false, done)
            case .auto:
                if !characteristic.canAcquireNotify {
                    startNotify(characteristic, done)
                } else if characteristic.notifying {
                    // Someone holds a notify session (perhaps our own from an
                    // earlier fallback): AcquireNotify would say InProgress.
                    logger.info("\(characteristic.uuid) is notifying for a D-Bus client already: receiving through StartNotify")
                    startNotify(characteristic, done)
                } else {
                    acquireNotify(characteristic, fallBack: true, done)
                }
            }
        }
    }

    /// StartNotify (its answer's rules: `BlueZReplies.startNotify`).
    private func startNotify(_ characteristic: GattCharacteristic, _ done: @escaping (LinkFailure?) -> Void) {
        send(.startNotify(characteristic.path)) { result in
            done(BlueZReplies.startNotify(result.map { _ in () }, characteristic: characteristic.uuid))
        }
    }

    /// AcquireNotify. Its socket lives for this link only: bluetoothd closes
    /// it on the next link loss, and the next subscribe acquires again.
    private func acquireNotify(
        _ characteristic: GattCharacteristic, fallBack: Bool, _ done: @escaping (LinkFailure?) -> Void
    ) {
        send(.acquireNotify(characteristic.path)) { [weak self, logger] result in
            guard let self else { return }
            switch result {
            case .success(let body):
                do throws(BlueZError) {
                    let acquired = try AcquiredNotifications(reply: body)
                    onAcquired?(characteristic, acquired)
                    logger.info("receiving \(characteristic.uuid) through an acquired socket (MTU \(acquired.mtu))")
                    done(nil)
                } catch {
                    done(Self.failure(error))
                }
            case .failure(let error):
                switch BlueZReplies.acquireNotifyRefused(error, characteristic: characteristic.uuid, mayUseStartNotify: fallBack) {
                case .useStartNotify:
                    logger.info("another D-Bus client holds a notify session on \(characteristic.uuid): receiving through StartNotify")
                    startNotify(characteristic, done)
                case .failed(let failure):
                    done(failure)
                }
            }
        }
    }

    // MARK: Keep-alive

    /// A keep-alive poll that waits for its answer: the write's (which
    /// tells that bluetoothd took it), or the read's (a reading).
    private func poll(_ id: Int, timeout: Duration) {
        guard let characteristic = resolution.keepalive, let device = resolution.device else {
            return finish(.pollFinished(poll: id, .failure(LinkFailure(.transient, "keep-alive characteristic not found"))))
        }
        let call: PreparedCall
        do throws(BlueZError) {
            call = try keepAlive(characteristic.path)
        } catch {
            return finish(.pollFinished(poll: id, .failure(Self.failure(error))))
        }
        if config.keepalive.write != nil {
            send(call, timeout: timeout) { [finish] result in
                finish(.pollFinished(poll: id, BlueZReplies.poll(result.map { _ in () })))
            }
        } else {
            send(call, timeout: timeout) { [finish, wallClock, weak self] result in
                switch result {
                case .success(let body):
                    guard let bytes = body.first?.bytes else {
                        return finish(.pollFinished(poll: id, .failure(LinkFailure(.transient, "ReadValue reply is not ay"))))
                    }
                    self?.onReading?(Reading(
                        receivedAt: wallClock(), device: device.address, characteristic: characteristic.uuid, source: .read,
                        payload: bytes
                    ))
                    finish(.pollFinished(poll: id, .success(())))
                case .failure(let error):
                    finish(.pollFinished(poll: id, BlueZReplies.poll(.failure(error))))
                }
            }
        }
    }

    /// The keep-alive write, sent without asking for an answer. The
    /// supervisor decides this only for a write command, where bluetoothd
    /// answers at once (`gatt-client.c` returns from `WriteValue` when the
    /// command is queued) and, asked for no answer, sends none: the daemon
    /// is not woken a second time. A refusal goes unseen until the next
    /// poll that waits for its answer.
    private func pollWithoutReply() {
        guard let characteristic = resolution.keepalive, config.keepalive.write != nil else {
            return logger.debug("keep-alive not sent: the characteristic is not resolved")
        }
        do throws(BlueZError) {
            try client.send(keepAlive(characteristic.path))
        } catch {
            logger.debug("keep-alive not sent: \(error)")
        }
    }

    /// The keep-alive's call on `characteristic`, marshalled once per
    /// characteristic object and sent as a copy each time: the same bytes
    /// go out every interval, and marshalling them again cost more than
    /// the rest of the poll (docs/development.md, idle CPU).
    private func keepAlive(_ characteristic: ObjectPath) throws(BlueZError) -> PreparedCall {
        if let keepAliveCall, keepAliveCall.characteristic == characteristic { return keepAliveCall.call }
        // The request's timeout is not part of the call: each send gives its own.
        let request: BlueZRequest
        if let bytes = config.keepalive.write {
            let type: WriteType = config.keepalive.writeType == .command ? .command : .request
            request = .writeValue(characteristic, bytes, type: type, timeout: client.callTimeout)
        } else {
            request = .readValue(characteristic, timeout: client.callTimeout)
        }
        let call = try client.prepare(request)
        keepAliveCall = (characteristic, call)
        return call
    }

    // MARK: Escalation

    private func escalate(_ step: EscalationStep) {
        let adapter = resolution.adapter
        if step == .powerCycle, let adapter {
            logger.warning("escalating: power-cycle on \(adapter.interfaceName)", metadata: ["event": "escalation"])
        }
        // The other steps are run by the service (off the loop when they
        // block), which calls `escalationStepDone`.
        carryOut(escalation.begin(step, adapterPath: adapter?.path, adapter: Self.adapterView(resolution.observation)))
    }

    /// The service's calls for `step` are done.
    func escalationStepDone(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) {
        carryOut(escalation.stepCallsDone(step, result))
    }

    /// Called on every change of the observation.
    func observationChanged(_ observation: LinkObservation) {
        carryOut(escalation.adapterChanged(Self.adapterView(observation)))
    }

    private static func adapterView(_ observation: LinkObservation) -> EscalationRun.Adapter {
        EscalationRun.Adapter(powered: observation.adapterPowered, blocked: observation.radioBlock != .none)
    }

    private func carryOut(_ effects: [EscalationRun.Effect]) {
        for effect in effects {
            switch effect {
            case .setPowered(let adapter, let on):
                send(.setPowered(adapter, on)) { [self] result in
                    carryOut(escalation.poweredAnswered(BlueZReplies.setPowered(result.map { _ in () })))
                }
            case .startTimer(let delay):
                if let escalationTimer { loop.cancelTimer(escalationTimer) }
                escalationTimer = loop.schedule(after: delay) { [self] in
                    escalationTimer = nil
                    carryOut(escalation.timerFired())
                }
            case .cancelTimer:
                if let escalationTimer { loop.cancelTimer(escalationTimer) }
                escalationTimer = nil
            case .finished(let step, let result):
                finish(.escalationFinished(step, run: escalationRun, result))
            }
        }
    }

    /// The configured characteristics the connected dongle does not export,
    /// to explain an attempt that timed out waiting for services.
    func missingCharacteristics() -> [String]? {
        guard resolution.observation.servicesResolved, !resolution.observation.characteristicsReady else { return nil }
        var missing = config.dongle.notify.filter { uuid in !resolution.notify.contains { $0.uuid == uuid } }
        if config.keepalive.enabled, resolution.keepalive == nil {
            missing.append(config.keepalive.characteristic)
        }
        return missing
    }

    /// The shared mapping (`BlueZReplies`), which the deterministic simulation runs too.
    static func failure(_ error: BlueZError) -> LinkFailure {
        LinkFailure(error)
    }
}

/// A value that only the loop touches, carried through a `@Sendable`
/// callback that runs on that loop (a bus reply).
final class LoopBound<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
