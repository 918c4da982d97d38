import BlueZ
import DBus
import LinkCore
import LinkPolicy
import LinkSupervisor

/// The adapter layer, restated for the model: each supervisor action becomes
/// the BlueZ call `ActionLane.perform` would make, the model answers it as
/// bluetoothd would (errors by name), and the answer comes back as a
/// supervisor event through the daemon's own reply rules (`BlueZReplies`:
/// StartNotify's and StartDiscovery's `InProgress` are success, the error
/// mapping). What is still restated here, each with ActionLane's reason: a
/// Connect's D-Bus timeout is the attempt's plus 1 s; a subscribe with
/// nothing to subscribe to succeeds at once; a poll without the
/// characteristic fails at once; an escalation's result is reported once the
/// adapter shows powered again (or after 10 s).
extension Simulation {

    func perform(_ action: SupervisorAction) {
        switch action {
        case .connect(let id, let timeout):
            lastConnectID = id
            guard world.observation.devicePresent else {
                return deliver(.connectFinished(attempt: id, .failure(LinkFailure(.transient, "the dongle is not known"))))
            }
            guard world.deviceObject else {
                // Removed, and Tether has not heard so yet.
                let error = BlueZError(name: DBusErrorName.unknownObject, message: "Method \"Connect\" with signature \"\" on interface \"org.bluez.Device1\" doesn't exist")
                return deliver(.connectFinished(attempt: id, BlueZReplies.connect(.failure(error))))
            }
            connect(id, dbusTimeout: timeout + .seconds(1))
        case .disconnect:
            guard world.deviceObject, world.observation.devicePresent else { return }
            disconnect()
        case .subscribe(let id):
            // No characteristic resolved: nothing to subscribe to (ActionLane.subscribe).
            guard world.observation.characteristicsReady else {
                return deliver(.subscribeFinished(attempt: id, .success(())))
            }
            startNotify(id)
        case .pair(let id, _):
            // The model's dongle needs no bond and the simulated config does
            // not pair (`Supervisor.Settings.pairs` is false), so this is
            // never decided; if it were, it fails loudly in the trace.
            deliver(.pairFinished(attempt: id, .failure(LinkFailure(.fatal, "the simulation does not model pairing"))))
        case .poll(let id, let timeout):
            guard world.observation.characteristicsReady else {
                return deliver(.pollFinished(poll: id, .failure(LinkFailure(.transient, "keep-alive characteristic not found"))))
            }
            writeValue(id, timeout: timeout)
        case .pollWithoutReply:
            // The write reaches the dongle as an answered one does; nothing
            // comes back, not even bluetoothd's "Not connected".
            if world.connected, world.observation.characteristicsReady, world.dongleReachable { world.dongleLastHeard = now }
        case .startDiscovery(let id):
            guard world.observation.adapterPresent else {
                return deliver(.discoveryFailed(discovery: id, LinkFailure(.transient, "no adapter")))
            }
            startDiscovery(id)
        case .stopDiscovery:
            guard world.observation.adapterPresent, world.discovering else { return }
            world.discovering = false
            advertisementGeneration += 1
        case .powerOn:
            guard world.observation.adapterPresent else { return }
            if world.adapterPresent, world.bluezUp, !world.adapterPowered {
                world.adapterPowered = true
                record(.world("adapter powered on (Tether)"))
                publishObservation()
            }
        case .escalate(let step, let run):
            escalationRun = run
            escalate(step)
        case .checkController(let id):
            // The model's controller always answers while it is there; one
            // that is gone cannot be asked.
            deliver(.controllerChecked(check: id, world.observation.adapterPresent ? .responsive : .unknown("no controller")))
        case .removeDevice(let id):
            guard world.observation.adapterPresent, world.deviceObject else {
                return deliver(.removeDeviceFinished(removal: id, .failure(LinkFailure(.transient, "the device object is already gone"))))
            }
            removeDevice(id)
        case .startTimer(let timer, let delay):
            startTimer(timer, after: delay)
        case .cancelTimer(let timer):
            cancelTimer(timer)
        case .transition, .report, .answerReconnect:
            break
        }
    }

    // MARK: Device1.Connect and Disconnect

    private func connect(_ id: Int, dbusTimeout: Duration) {
        let error: BlueZError?
        var latency = random.duration(.milliseconds(1) ... .milliseconds(10))
        if world.stuckConnect || world.pendingConnect != nil {
            error = BlueZError(name: BlueZ.ErrorName.inProgress, message: "In Progress")
        } else if !world.adapterUsable {
            error = BlueZError(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready")
        } else if world.connected {
            error = nil  // already connected: answered at once
            latency = .zero
        } else if let failure = world.connectError {
            error = failure
            latency = random.duration(.milliseconds(20) ... .seconds(3))
        } else if world.staleObject {
            error = BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal)
            latency = random.duration(.seconds(1) ... .seconds(4))
        } else if !world.dongleReachable {
            // The kernel's LE connection timeout ends it.
            error = BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal)
            latency = .seconds(20) + random.duration(.zero ... .milliseconds(200))
        } else {
            error = nil
            latency = random.duration(.milliseconds(30) ... .milliseconds(1500))
        }
        // Answers bluetoothd gives from its own state (InProgress, NotReady,
        // already connected) are not held up by slow-replies, which models a
        // slow air or a busy controller. (Held up too, seeds 103 and 122 had
        // the dongle fall asleep; see docs/development.md, "Deterministic simulation".)
        let immediate = error.map { $0.name == BlueZ.ErrorName.inProgress || $0.name == BlueZ.ErrorName.notReady } ?? false
        if world.slowReplies, !immediate, latency > .zero { latency += random.duration(.seconds(1) ... .seconds(40)) }
        let token = token()
        if !immediate { world.pendingConnect = (id, incarnation, token) }
        let replies = latency <= dbusTimeout
        if !replies { schedule(.connectNoReply(id: id, incarnation: incarnation), after: dbusTimeout) }
        pendingReplies[token] = (id, incarnation)
        schedule(.connectOutcome(token: token, error.map { .failure($0) } ?? .success(()), replies: replies), after: latency)
    }

    func connectOutcome(token: UInt64, _ result: Result<Void, BlueZError>, replies: Bool) {
        guard let (id, incarnation) = pendingReplies.removeValue(forKey: token) else { return }
        var result = result
        if let pending = world.pendingConnect, pending.token == token {
            world.pendingConnect = nil
            if case .success = result, !world.connected {
                if world.adapterUsable, world.dongleReachable {
                    linkUp()
                } else {
                    result = .failure(BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal))
                }
            }
        } else if case .success = result, !world.connected {
            // Cancelled (a Disconnect, the adapter gone) before it completed.
            result = .failure(BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal))
        }
        guard replies else { return publishObservation() }
        // The reply and Connected=true reach Tether by different paths, in either order.
        if random.chance(0.5) {
            publishObservation()
            reply(connect: id, incarnation: incarnation, result)
        } else {
            reply(connect: id, incarnation: incarnation, result)
            publishObservation()
        }
    }

    func reply(connect id: Int, incarnation: Int, _ result: Result<Void, BlueZError>) {
        guard tetherAlive, incarnation == self.incarnation else { return }
        if case .failure(let error) = result {
            checker.connectAnswered(id: id, error: error, self)
        }
        deliver(.connectFinished(attempt: id, BlueZReplies.connect(result)))
    }

    func linkUp() {
        world.connected = true
        world.servicesResolved = false
        world.characteristicsReady = false
        world.dongleLastHeard = now
        linkToken += 1
        record(.world("connected"))
        var resolve = random.duration(.milliseconds(20) ... .milliseconds(600))
        if world.slowReplies { resolve += random.duration(.zero ... .seconds(5)) }
        schedule(.servicesResolved(linkToken: linkToken), after: resolve)
    }

    /// Device1.Disconnect: cancels a pending connect (ours or a stuck one), or drops the link.
    private func disconnect() {
        checker.disconnectSent()
        if world.stuckConnect {
            world.stuckConnect = false
            record(.world("the stuck connect is cancelled"))
        }
        if world.pendingConnect != nil {
            world.pendingConnect = nil
            record(.world("the pending connect is cancelled"))
        }
        if world.connected {
            world.dropLink()
            record(.world("disconnected (Tether)"))
            publishObservation()
        }
    }

    // MARK: GATT: StartNotify and the keep-alive write

    private func startNotify(_ id: Int) {
        guard world.connected else {
            let error = BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.notConnected)
            return deliver(.subscribeFinished(attempt: id, subscribeResult(.failure(error))))
        }
        // Our own session still registered (bluetoothd re-arms it on
        // reconnect): bluetoothd answers InProgress at once.
        if world.notifySession {
            let error = BlueZError(name: BlueZ.ErrorName.inProgress, message: "In Progress")
            return deliver(.subscribeFinished(attempt: id, subscribeResult(.failure(error))))
        }
        var latency = random.duration(.milliseconds(5) ... .milliseconds(120))
        if world.slowReplies { latency += random.duration(.zero ... .seconds(8)) }
        schedule(.subscribeOutcome(id: id, incarnation: incarnation, linkToken: linkToken, gattGeneration: world.gattGeneration), after: latency)
    }

    func subscribeOutcome(id: Int, incarnation: Int, linkToken: UInt64, gattGeneration: Int) {
        let ok = world.connected && linkToken == self.linkToken && gattGeneration == world.gattGeneration
            && world.characteristicsReady
        if ok, tetherAlive, incarnation == self.incarnation { world.notifySession = true }
        guard tetherAlive, incarnation == self.incarnation else { return }
        let answer: Result<Void, BlueZError> = ok
            ? .success(())
            : .failure(BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.notConnected))
        deliver(.subscribeFinished(attempt: id, subscribeResult(answer)))
    }

    /// StartNotify's answer as ActionLane reports it (one characteristic, the model's).
    private func subscribeResult(_ answer: Result<Void, BlueZError>) -> Result<Void, LinkFailure> {
        BlueZReplies.startNotify(answer, characteristic: Self.notifyCharacteristic).map { .failure($0) } ?? .success(())
    }

    /// The model dongle's notify characteristic (Nordic UART's TX), for messages.
    static let notifyCharacteristic = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

    private func writeValue(_ id: Int, timeout: Duration) {
        guard world.connected else {
            let error = BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.notConnected)
            return schedule(.pollOutcome(id: id, incarnation: incarnation, .failure(error)), after: .milliseconds(1))
        }
        if world.dongleReachable { world.dongleLastHeard = now }
        var latency = random.duration(.milliseconds(3) ... .milliseconds(40))
        if world.slowReplies { latency += random.duration(.zero ... .seconds(8)) }
        if latency > timeout {
            let error = BlueZError(name: "org.freedesktop.DBus.Error.NoReply", message: "Did not receive a reply")
            schedule(.pollOutcome(id: id, incarnation: incarnation, .failure(error)), after: timeout)
        } else {
            schedule(.pollOutcome(id: id, incarnation: incarnation, .success(())), after: latency)
        }
    }

    // MARK: Adapter1: discovery, escalation, RemoveDevice

    private func startDiscovery(_ id: Int) {
        guard world.adapterUsable else {
            return discoveryAnswered(id, .failure(BlueZError(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready")))
        }
        guard !world.discovering else {
            // Already discovering for us.
            return discoveryAnswered(
                id, .failure(BlueZError(name: BlueZ.ErrorName.inProgress, message: "Operation already in progress")))
        }
        world.discovering = true
        advertisementGeneration += 1
        schedule(.advertisement(generation: advertisementGeneration), after: random.duration(.milliseconds(200) ... .seconds(3)))
    }

    /// StartDiscovery's answer, through ActionLane's rule.
    private func discoveryAnswered(_ id: Int, _ answer: Result<Void, BlueZError>) {
        if let failure = BlueZReplies.startDiscovery(answer) { deliver(.discoveryFailed(discovery: id, failure)) }
    }

    // MARK: Escalation, through the daemon's own run (EscalationRun)

    /// The adapter's object path in the model (one adapter, hci0).
    static let adapterPath: ObjectPath = "/org/bluez/hci0"

    /// power-cycle: EscalationRun's calls, which the model answers;
    /// hci-reset: the controller resets (the link goes) and comes back
    /// powered, and the reset's call returns; either way EscalationRun waits
    /// for the adapter and gives the verdict, as in the daemon.
    private func escalate(_ step: EscalationStep) {
        guard world.observation.adapterPresent else {
            return deliver(.escalationFinished(step, run: escalationRun, .failure(LinkFailure(.transient, "no adapter"))))
        }
        carryOut(escalation.begin(step, adapterPath: Self.adapterPath, adapter: escalationAdapter))
        guard step != .powerCycle else { return }
        adapterOff("escalation: \(step.rawValue)")
        schedule(.escalationStepReturns(step, incarnation: incarnation), after: random.duration(.milliseconds(300) ... .seconds(2)))
    }

    /// A step the daemon runs off the loop (hci-reset) returns: the
    /// controller is back, and bluetoothd powers it.
    func escalationStepReturns(_ step: EscalationStep, incarnation: Int) {
        let back = world.adapterPresent && world.bluezUp
        if back {
            world.adapterPowered = true
            record(.world("adapter powered on (\(step.rawValue))"))
        }
        guard tetherAlive, incarnation == self.incarnation else { return }
        publishObservation()
        let result: Result<Void, LinkFailure> = back ? .success(()) : .failure(LinkFailure(.fatal, "hci0: no such device"))
        carryOut(escalation.stepCallsDone(step, result))
    }

    /// Adapter1.Powered from the run, answered by the model.
    func escalationPowered(_ on: Bool, incarnation: Int) {
        guard tetherAlive, incarnation == self.incarnation else { return }
        let answer: Result<Void, BlueZError>
        if world.adapterPresent, world.bluezUp {
            if on, !world.adapterPowered {
                world.adapterPowered = true
                record(.world("adapter powered on (power-cycle)"))
                publishObservation()
            } else if !on, world.adapterPowered {
                adapterOff("escalation: power-cycle")
            }
            answer = .success(())
        } else {
            answer = .failure(BlueZError(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready"))
        }
        carryOut(escalation.poweredAnswered(BlueZReplies.setPowered(answer)))
    }

    func escalationTimerFired(generation: UInt64) {
        guard tetherAlive, generation == escalationTimerGeneration else { return }
        carryOut(escalation.timerFired())
    }

    /// What EscalationRun sees of the model's adapter.
    var escalationAdapter: EscalationRun.Adapter {
        EscalationRun.Adapter(powered: world.observation.adapterPowered, blocked: world.observation.radioBlock != .none)
    }

    func carryOut(_ effects: [EscalationRun.Effect]) {
        for effect in effects {
            switch effect {
            case .setPowered(_, let on):
                schedule(.escalationPowered(on, incarnation: incarnation), after: random.duration(.milliseconds(1) ... .milliseconds(20)))
            case .startTimer(let delay):
                escalationTimerGeneration += 1
                schedule(.escalationTimer(generation: escalationTimerGeneration), after: delay)
            case .cancelTimer:
                escalationTimerGeneration += 1
            case .finished(let step, let result):
                deliver(.escalationFinished(step, run: escalationRun, result))
            }
        }
    }

    private func removeDevice(_ id: Int) {
        if world.connected { world.dropLink() }
        world.pendingConnect = nil
        world.deviceObject = false
        world.staleObject = false
        world.notifySession = false
        // The reply first, InterfacesRemoved later: BlueZ sends it from an
        // idle callback (gdbus/object.c), which a busy bluetoothd runs late;
        // in `make e2e` a reset 65 ms after the reply was answered first. A
        // decision taken on the reply sees the object still listed.
        world.removalUnsignalled = true
        record(.world("device object removed (Tether); InterfacesRemoved to follow"))
        publishObservation()  // the link's end, if there was one
        deliver(.removeDeviceFinished(removal: id, BlueZReplies.removeDevice(.success(()))))
        schedule(.removalSignalled, after: random.duration(.milliseconds(1) ... .seconds(1)))
    }

    /// bluetoothd's InterfacesRemoved for the object it removed (before any
    /// InterfacesAdded of a new one, which `advertisement` sends).
    func signalRemoval() {
        guard world.removalUnsignalled else { return }
        world.removalUnsignalled = false
        record(.world("InterfacesRemoved for the removed device object"))
        publishObservation()
    }

    /// The adapter goes unpowered: the link, discovery and any pending connect with it.
    func adapterOff(_ why: String) {
        world.adapterPowered = false
        world.dropLink()
        world.pendingConnect = nil
        world.discovering = false
        advertisementGeneration += 1
        record(.world("adapter powered off (\(why))"))
        publishObservation()
    }
}
