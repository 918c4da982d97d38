import BlueZ
import BlueZLinkFailure
import Configuration
import DBus
import EventLoop
import FoundationEssentials
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
    private var escalation: EscalationInFlight?
    /// The keep-alive's call (its write, or its read), marshalled for this
    /// characteristic object.
    private var keepAliveCall: (characteristic: ObjectPath, call: PreparedCall)?

    /// An escalation step between its last call and the adapter showing powered again.
    private struct EscalationInFlight {
        var step: EscalationStep
        var result: Result<Void, LinkFailure>?
        var deadline: EventLoop.TimerID?
        /// The adapter was seen unpowered or gone since the step began. A
        /// USB step's adapter must go and come back (the kernel re-probes the
        /// controller): the old one, still listed for a moment, proves nothing.
        var adapterWentAway: Bool
    }

    init(
        client: BlueZClient, loop: EventLoop, config: TetherConfig, logger: Logger,
        finish: @escaping (SupervisorEvent) -> Void
    ) {
        self.logger = logger
        self.client = client
        self.loop = loop
        self.config = config
        self.finish = finish
    }

    /// Stops reporting replies (the service is ending).
    func cancelAll() {
        generation += 1
        heldForStopDiscovery = nil
        if let deadline = escalation?.deadline { loop.cancelTimer(deadline) }
        escalation = nil
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
        if case .escalate(let step) = action { return step != .powerCycle }
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
                finish(.connectFinished(attempt: id, result.map { _ in () }.mapError(Self.failure)))
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
        case .startDiscovery:
            guard let adapter = resolution.adapter?.path else {
                return finish(.discoveryFailed(LinkFailure(.transient, "no adapter")))
            }
            // Both at once: the filter is served first (one client's calls are
            // served in order), and a StopDiscovery decided next cannot
            // overtake the start.
            let uuids = config.dongle.serviceUUID.map { [$0] } ?? []
            send(.setDiscoveryFilter(adapter, uuids: uuids)) { [logger] result in
                if case .failure(let error) = result { logger.warning("SetDiscoveryFilter: \(error); discovering unfiltered") }
            }
            send(.startDiscovery(adapter)) { [finish] result in
                switch result {
                case .success: break
                case .failure(let error) where error.name == BlueZ.ErrorName.inProgress: break  // already discovering for us
                case .failure(let error): finish(.discoveryFailed(Self.failure(error)))
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
        case .escalate(let step):
            escalate(step)
        case .removeDevice:
            guard let adapter = resolution.adapter?.path, let device = resolution.device?.path else {
                return finish(.removeDeviceFinished(.failure(LinkFailure(.transient, "the device object is already gone"))))
            }
            send(.removeDevice(adapter: adapter, device: device)) { [finish] result in
                finish(.removeDeviceFinished(result.map { _ in () }.mapError(Self.failure)))
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

    /// StartNotify. `InProgress` is our own earlier StartNotify still being
    /// served: success for us.
    private func startNotify(_ characteristic: GattCharacteristic, _ done: @escaping (LinkFailure?) -> Void) {
        send(.startNotify(characteristic.path)) { result in
            if case .failure(let error) = result, error.name != BlueZ.ErrorName.inProgress {
                return done(Self.notifyFailure(error, characteristic))
            }
            done(nil)
        }
    }

    /// `NotPermitted "Notify acquired"` names who can fix it: another client
    /// holds the socket, or bluetoothd before 5.84 kept a stale acquisition
    /// after a link loss during an AcquireNotify (its commit 476ae809a),
    /// which only a bluetoothd restart clears. Transient: an attempt that
    /// raced the release of our own earlier socket succeeds next time.
    static func notifyFailure(_ error: BlueZError, _ characteristic: GattCharacteristic) -> LinkFailure {
        if error.name == BlueZ.ErrorName.notPermitted, error.message == "Not paired" {
            return LinkFailure(.fatal, "the notifications of \(characteristic.uuid) need an encrypted link and bluetoothd could not pair (NotPermitted \"Not paired\"): set dongle.pairing, or pair the dongle by hand (bluetoothctl pair)")
        }
        guard error.name == BlueZ.ErrorName.notPermitted, error.description.contains("Notify acquired") else {
            return failure(error)
        }
        return LinkFailure(.transient, "bluetoothd says the notifications of \(characteristic.uuid) are acquired (NotPermitted \"Notify acquired\") and Tether does not hold them: another D-Bus client does, or bluetoothd (before BlueZ 5.84) kept a stale AcquireNotify after a link dropped during one, which neither AcquireNotify nor StartNotify can get past until bluetoothd restarts (systemctl restart bluetooth)")
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
            case .failure(let error) where error.name == BlueZ.ErrorName.inProgress:
                // Another D-Bus client holds a notify session on it.
                guard fallBack else {
                    return done(LinkFailure(.fatal, "another D-Bus client holds a notify session on \(characteristic.uuid), so AcquireNotify is refused (InProgress); set dongle.notify_path to \"auto\" or \"start-notify\""))
                }
                logger.info("another D-Bus client holds a notify session on \(characteristic.uuid): receiving through StartNotify")
                startNotify(characteristic, done)
            case .failure(let error):
                done(Self.notifyFailure(error, characteristic))
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
                finish(.pollFinished(poll: id, result.map { _ in () }.mapError(Self.failure)))
            }
        } else {
            send(call, timeout: timeout) { [finish, weak self] result in
                switch result {
                case .success(let body):
                    guard let bytes = body.first?.bytes else {
                        return finish(.pollFinished(poll: id, .failure(LinkFailure(.transient, "ReadValue reply is not ay"))))
                    }
                    self?.onReading?(Reading(
                        receivedAt: Date(), device: device.address, characteristic: characteristic.uuid, source: .read,
                        payload: bytes
                    ))
                    finish(.pollFinished(poll: id, .success(())))
                case .failure(let error):
                    finish(.pollFinished(poll: id, .failure(Self.failure(error))))
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
        escalation = EscalationInFlight(step: step, adapterWentAway: !resolution.observation.adapterPowered)
        switch step {
        case .powerCycle:
            guard let adapter = resolution.adapter else {
                escalation = nil
                return finish(.escalationFinished(step, .failure(LinkFailure(.transient, "no adapter"))))
            }
            logger.warning("escalating: power-cycle on \(adapter.interfaceName)", metadata: ["event": "escalation"])
            send(.setPowered(adapter.path, false)) { [self] off in
                loop.schedule(after: .milliseconds(500)) { [self] in
                    powerOn(adapter.path, attempt: 1, offResult: off.map { _ in () }.mapError(Self.failure))
                }
            }
        case .hciReset, .usbReset, .usbRebind, .rfkillUnblock:
            break  // run by the service (off the loop when it blocks), which calls `escalationStepDone`
        }
    }

    /// Whatever happened, the adapter must end up on: a wedged controller is
    /// why we are here, so try more than once.
    private func powerOn(_ adapter: ObjectPath, attempt: Int, offResult: Result<Void, LinkFailure>) {
        send(.setPowered(adapter, true)) { [self] result in
            switch result {
            case .success:
                escalationStepDone(.powerCycle, offResult)
            case .failure where attempt < 3:
                loop.schedule(after: .seconds(1)) { [self] in powerOn(adapter, attempt: attempt + 1, offResult: offResult) }
            case .failure(let error):
                escalationStepDone(.powerCycle, .failure(Self.failure(error)))
            }
        }
    }

    /// The step's calls are done; report once bluetoothd shows the adapter
    /// powered again (or after 10 s), so the supervisor judges the result,
    /// not a race.
    func escalationStepDone(_ step: EscalationStep, _ result: Result<Void, LinkFailure>) {
        guard escalation?.step == step else { return }
        escalation?.result = result
        // A USB step or an unblock that failed changed nothing to wait for.
        if case .failure = result, step.reprobesController || step == .rfkillUnblock { return reportEscalation() }
        if adapterBack { return reportEscalation() }
        escalation?.deadline = loop.schedule(after: step.reprobesController ? Self.reprobeWait : .seconds(10)) { [self] in
            reportEscalation()
        }
    }

    /// How long a USB step waits for the controller to come back: the
    /// kernel's re-probe, bluetoothd's Index Added and its power-on take
    /// 1 to 4 s in `make e2e`.
    static let reprobeWait: Duration = .seconds(15)

    /// The step in flight has its adapter powered again, and a USB step's
    /// adapter went away first.
    private var adapterBack: Bool {
        guard let escalation, resolution.observation.adapterPowered, resolution.observation.radioBlock == .none else {
            return false
        }
        return !escalation.step.reprobesController || escalation.adapterWentAway
    }

    /// Called on every change of the observation.
    func observationChanged(_ observation: LinkObservation) {
        if !observation.adapterPowered { escalation?.adapterWentAway = true }
        if adapterBack { reportEscalation() }
    }

    /// Reports the step in flight, once its calls are done.
    private func reportEscalation() {
        guard let pending = escalation, let result = pending.result else { return }
        if let deadline = pending.deadline { loop.cancelTimer(deadline) }
        escalation = nil
        finish(.escalationFinished(pending.step, result))
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

    /// The shared mapping (`BlueZLinkFailure`), which the deterministic simulation runs too.
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

/// An HCI reset through libbluetooth, as an escalation result.
enum HCIReset {
    static func run(_ interfaceName: String) -> Result<Void, LinkFailure> {
        HCIController.reset(interfaceName).mapError { LinkFailure(.fatal, $0.description) }
    }
}
