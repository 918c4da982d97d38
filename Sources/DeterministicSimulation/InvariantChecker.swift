import BlueZ
import DBus
import DurationUnits
import FoundationEssentials
import LinkSupervisor
import Pacing
import Simulator
@_spi(Simulation) import TetherDaemon

/// Checks the invariants (`Invariant`) as the run goes, from three places a
/// gateway's operator could look at too: what crosses the bus (every
/// message the bus daemon routes), what the simulated bluetoothd and dongle
/// record (connects, writes, notifications, sleeps), and the supervisor's
/// decisions as the daemon carries them out; and after every instant.
/// Counts every check made.
///
/// It judges from what it sees, never from the code under test's own
/// predicates (a planted bug in `LinkObservation.linkReady` must not blind it).
struct InvariantChecker {
    let settings: SimulationSettings
    private(set) var checks = [Int](repeating: 0, count: Invariant.allCases.count)

    // MARK: The current Tether process

    /// Its bus connection's unique names (a new one after each bus restart).
    private var tetherNames: Set<String> = []
    private var tetherAlive = false
    /// The last observation handed to its supervisor, and its state.
    private var seen = LinkObservation()
    private var state: SupervisorState = .waitingForBluez
    private var lastPollAt: Duration = .zero
    private var lastAttempt = 0
    private var windowFirstAttemptAt: Duration = .zero
    /// What its bus connection has under way; afresh with each process and connection.
    private var connection = UnderWay()
    /// Tether has been online with its dongle (then it is bound to it).
    private var boundToDongle = false

    // MARK: bluetoothd's side

    /// When bluetoothd's latest hang began, and when the Tether process
    /// last started (for what `dongle-never-sleeps` excuses).
    private var hangStartedAt: Duration?
    private var tetherStartedAt: Duration = .zero
    /// When a notification last went to Tether.
    private var lastNotificationAt: Duration?
    private var callSecond: Int64 = -1
    private var callsThisSecond = 0
    private var signalMinute: Int64 = -1
    private var signalsThisMinute = 0
    /// Other devices advertising now (the simulator's `other-advertisers` events).
    private var otherAdvertisers = 0
    /// Forged notifications sent so far (their sequence numbers follow
    /// `Simulation.forgedSequenceBase`).
    var forgedSent = 0
    /// Readings delivered, with when and whether the disk refused writes
    /// then, since the last kill (for excusing what a kill loses).
    private var recentDeliveries: [(sequence: UInt64, at: Duration, diskRefused: Bool)] = []

    init(settings: SimulationSettings) {
        self.settings = settings
        otherAdvertisers = settings.otherAdvertisers
    }

    mutating func count(_ invariant: Invariant) {
        checks[invariant.index] += 1
    }

    var totalChecks: Int { checks.reduce(0, +) }

    // MARK: Process lifetime

    mutating func processStarted(_ simulation: Simulation) {
        tetherAlive = true
        tetherStartedAt = simulation.now
        tetherNames = []
        seen = LinkObservation()
        state = .waitingForBluez
        connection = UnderWay()
        lastAttempt = 0
    }

    /// SIGKILL: what was delivered and not yet written may be lost, if it
    /// came within the flush interval before, or while the disk refused it.
    mutating func processKilled(_ simulation: Simulation, _ tether: SimulatedTether) {
        let since = simulation.now - settings.flushInterval - .seconds(1)
        for delivery in recentDeliveries where delivery.at >= since || delivery.diskRefused {
            simulation.audit.excuse(delivery.sequence)
        }
        recentDeliveries.removeAll()
    }

    /// SIGTERM with a disk that refused writes: what it held is lost (exit 74).
    mutating func readingsLostAtStop(_ simulation: Simulation) {
        for delivery in recentDeliveries where delivery.diskRefused { simulation.audit.excuse(delivery.sequence) }
    }

    /// The bus went away: every connection closed, Tether's link service
    /// ended with its connection (a new one starts once the bus is back).
    mutating func busLost() {
        state = .waitingForBluez
        seen = LinkObservation()
        connection = UnderWay()
        tetherNames = []
    }

    mutating func processEnded() {
        tetherAlive = false
        connection = UnderWay()
        recentDeliveries.removeAll()
    }

    // MARK: The supervisor's decisions

    mutating func decided(_ decision: SupervisorDecision, _ simulation: Simulation) {
        let now = simulation.now
        if case .observed(let observation) = decision.event {
            count(.believesOnlyBluetoothd)
            if !observation.bluezPresent, simulation.bluezOwner != nil, !simulation.bluetoothdHung {
                simulation.violated(
                    .believesOnlyBluetoothd, "the supervisor was told bluetoothd left the bus while it owns org.bluez")
            }
            seen = observation
        }
        if case .escalationFinished(_, let run, _) = decision.event, connection.escalationStep?.run == run { connection.escalationStep = nil }
        if case .controllerChecked(let id, _) = decision.event { connection.controllerChecksOut.remove(id) }
        count(.statusTold)
        if Supervisor.leavesStatusAsItWas(decision.event, deciding: decision.actions), decision.status != decision.statusBefore {
            simulation.violated(
                .statusTold,
                "the status changed (\(decision.statusBefore) → \(decision.status)) in a step said to leave it: \(decision.event), deciding \(decision.actions)")
        }
        if decision.status.state != state { checkStatusAges(simulation) }
        state = decision.status.state
        if state != .escalating { connection.escalationStep = nil }
        if state == .online || state == .waitingForData {
            // A link that came up needs no verdict from before (the outage that asked is over).
            connection.controllerChecksOut = []
            if connection.subscribedSince == nil {
                connection.subscribedSince = now
                lastPollAt = now
            }
        } else {
            connection.subscribedSince = nil
        }
        if let cleared = simulation.lastClearAt, state == .online {
            simulation.longestRecovery = max(simulation.longestRecovery, now - cleared)
            simulation.lastClearAt = nil
        }
        for action in decision.actions {
            simulation.record(.action(action))
            switch action {
            case .poll, .pollWithoutReply:
                count(.callOrder)
                if state != .online && state != .waitingForData {
                    simulation.violated(.callOrder, "keep-alive poll decided in state \(state.rawValue)")
                }
            case .subscribe(let id):
                count(.callOrder)
                if !(seen.connected && seen.servicesResolved && seen.characteristicsReady) {
                    simulation.violated(
                        .callOrder,
                        "subscribe #\(id) on a link seen connected=\(seen.connected) resolved=\(seen.servicesResolved) characteristics=\(seen.characteristicsReady)")
                }
            case .connect(let id, _):
                count(.callOrder)
                if !seen.bluezPresent || !seen.adapterPresent || !seen.adapterPowered {
                    simulation.violated(.callOrder, "Connect #\(id) while the supervisor saw bluetoothd or the adapter unusable")
                }
            case .escalate(let step, let run):
                connection.escalationStep = (run, now)
                guard step == .powerCycle else { break }
                count(.noPowerCycleBeforeTheVerdict)
                if !connection.controllerChecksOut.isEmpty {
                    simulation.violated(
                        .noPowerCycleBeforeTheVerdict,
                        "power cycle #\(run) while controller check \(connection.controllerChecksOut.sorted()) is unanswered")
                }
            case .checkController(let id):
                connection.controllerChecksOut.insert(id)
            case .report(.reconnectAttempt(let attempt, _)):
                count(.retryWindowBounded)
                if attempt <= lastAttempt || lastAttempt == 0 { windowFirstAttemptAt = now }
                lastAttempt = attempt
                if attempt > settings.windowAttempts {
                    simulation.violated(.retryWindowBounded, "attempt \(attempt) of a window of \(settings.windowAttempts)")
                } else if now - windowFirstAttemptAt >= settings.window {
                    simulation.violated(
                        .retryWindowBounded,
                        "attempt \(attempt) comes \((now - windowFirstAttemptAt).simulationStamp) after the window's first (window \(settings.window.roundedText))")
                }
            case .report(.connected):
                lastAttempt = 0
                boundToDongle = true
            case .report(.windowExhausted), .report(.dongleAway):
                lastAttempt = 0
            case .transition(let from, let to, let cause):
                simulation.record(.tether("\(from.rawValue) → \(to.rawValue): \(cause)"))
            default:
                break
            }
        }
    }

    // MARK: What crosses the bus

    mutating func routed(_ message: BusTrafficRecord, _ simulation: Simulation) {
        let now = simulation.now
        let fromTether = tetherAlive && tetherNames.contains(message.sender)
        if fromTether, message.kind == .methodCall, message.destinationName == BlueZ.service
            || message.destinationName == simulation.bluezOwner
        {
            countCall(simulation)
            switch message.member {
            case "Connect":
                count(.callOrder)
                if let owed = connection.cancelOwed {
                    simulation.violated(.callOrder, "Connect without a Disconnect after a Connect answered \(owed)")
                } else if !connection.pendingConnects.isEmpty {
                    simulation.violated(.callOrder, "Connect while another Connect of this process is unanswered")
                }
                connection.pendingConnects.insert(message.serial)
                if connection.removedUnsignalled.contains(message.path) {
                    simulation.violated(.callOrder, "Connect on \(message.path), whose RemoveDevice bluetoothd answered before "
                        + "it signalled the object's removal")
                }
                if boundToDongle, settings.twin { count(.ownDongleOnly) }
                if boundToDongle, settings.twin, Self.contains(message.path, Self.twinElement) {
                    simulation.violated(.ownDongleOnly, "Connect to the other vehicle's dongle \(SimulationSettings.twinAddress) after binding to its own")
                }
            case "Disconnect":
                // bluetoothd serves a client's calls in order: the Connects
                // sent before this Disconnect are cancelled (or answered)
                // before it serves any Connect sent after it.
                connection.cancelOwed = nil
                connection.pendingConnects = []
            case "WriteValue":
                lastPollAt = now
            case "RemoveDevice":
                if let path = message.objectPathArgument { connection.removalsInFlight[message.serial] = path }
            default:
                break
            }
        }
        if message.kind == .methodReturn, tetherNames.contains(message.receiver),
           let path = connection.removalsInFlight.removeValue(forKey: message.replySerial)
        {
            connection.removedUnsignalled.insert(path)
            simulation.removalAnswered()
        } else if message.kind == .error, tetherNames.contains(message.receiver) {
            connection.removalsInFlight[message.replySerial] = nil
        }
        if message.kind == .signal, tetherNames.contains(message.receiver), let path = message.objectPathArgument,
           message.member == "InterfacesRemoved" || message.member == "InterfacesAdded"
        {
            connection.removedUnsignalled.remove(path)
        }
        if message.kind == .methodReturn || message.kind == .error, tetherNames.contains(message.receiver) {
            if connection.pendingConnects.remove(message.replySerial) != nil, let name = message.errorName {
                let error = BlueZError(name: name, message: message.errorMessage ?? "")
                if error.disposition == .needsCancel { connection.cancelOwed = error.description }
            }
        }
        if message.kind == .signal, tetherNames.contains(message.receiver), let value = message.characteristicValue,
           value.count >= 4, message.sender == simulation.bluezOwner
        {
            notificationDelivered(UInt64(value[0]) | UInt64(value[1]) << 8 | UInt64(value[2]) << 16 | UInt64(value[3]) << 24, simulation)
        }
        // Per advertisement, bluetoothd sends a PropertiesChanged (RSSI, data);
        // a new device object's InterfacesAdded comes once per device.
        if message.kind == .signal, !fromTether, tetherNames.contains(message.receiver), message.member == "PropertiesChanged",
           Self.isOtherDevice(message.path), message.sender == simulation.bluezOwner
        {
            signalDelivered(simulation)
        }
    }

    /// A notification of the dongle's reached Tether's connection: what the
    /// log must hold. A sequence number skipped was never delivered (the
    /// dongle sent it while nobody was subscribed, or into a bluetoothd
    /// whose bus had gone).
    private mutating func notificationDelivered(_ sequence: UInt64, _ simulation: Simulation) {
        if sequence > simulation.delivered + 1 {
            for skipped in (simulation.delivered + 1)..<sequence { simulation.audit.excuse(skipped) }
        }
        simulation.delivered = max(simulation.delivered, sequence)
        let now = simulation.now
        lastNotificationAt = now
        recentDeliveries.append((sequence, now, simulation.disk.full || simulation.disk.failing))
        if recentDeliveries.count > 4096 {
            let since = now - settings.flushInterval - .seconds(1)
            recentDeliveries.removeAll { !$0.diskRefused && $0.at < since }
        }
    }

    /// The bus daemon gave Tether's connection a name (its Hello's reply).
    mutating func tetherConnected(as name: String) {
        tetherNames.insert(name)
    }

    /// The device objects' path elements (`dev_AA_BB_…`), as bytes: the
    /// checks look for them in every signal's path, so no Foundation string
    /// search (which bridges to NSString) runs per message.
    private static func pathElement(_ address: String) -> [UInt8] {
        Array("dev_".utf8) + address.utf8.map { $0 == UInt8(ascii: ":") ? UInt8(ascii: "_") : $0 }
    }
    private static let dongleElement = pathElement(SimulationSettings.dongleAddress)
    private static let twinElement = pathElement(SimulationSettings.twinAddress)
    private static let anyDevice = Array("/dev_".utf8)

    /// A device object's path (or one below it) that is not the dongle's.
    private static func isOtherDevice(_ path: String) -> Bool {
        contains(path, anyDevice) && !contains(path, dongleElement)
    }

    private static func contains(_ path: String, _ needle: [UInt8]) -> Bool {
        var path = path
        return path.withUTF8 { bytes in
            guard bytes.count >= needle.count else { return false }
            outer: for start in 0...(bytes.count - needle.count) {
                for offset in needle.indices where bytes[start + offset] != needle[offset] { continue outer }
                return true
            }
            return false
        }
    }

    private mutating func countCall(_ simulation: Simulation) {
        count(.boundedActions)
        let second = simulation.now.wholeMilliseconds / 1000
        if second != callSecond {
            callSecond = second
            callsThisSecond = 0
        }
        callsThisSecond += 1
        if callsThisSecond > Invariant.maximumCallsPerSecond {
            simulation.violated(.boundedActions, "\(callsThisSecond) calls to bluetoothd within one simulated second")
        }
    }

    /// Other devices' property changes reaching Tether among many
    /// advertisers, once it knows its dongle's address: its match rules keep
    /// the street out (its own dongle's it hears, one per advertisement
    /// while discovering).
    private mutating func signalDelivered(_ simulation: Simulation) {
        let minute = simulation.now.wholeMilliseconds / 60000
        if minute != signalMinute {
            signalMinute = minute
            signalsThisMinute = 0
        }
        signalsThisMinute += 1
        guard otherAdvertisers >= 80, !settings.findsByName || boundToDongle else { return }
        count(.quietAmongMany)
        // What the street sends in a minute (each advertiser reported once
        // per `otherAdvertisingInterval` while discovery runs); the daemon's
        // sample of it lets one report time's batch in every 10 s.
        let reports = otherAdvertisers * 60 / Int(SimulationSettings.otherAdvertisingInterval.wholeMilliseconds / 1000)
        if signalsThisMinute > max(Invariant.maximumSignalsPerMinute, reports / Invariant.streetShare) {
            simulation.violated(
                .quietAmongMany,
                "\(signalsThisMinute) signals reached Tether within one simulated minute among \(otherAdvertisers) advertisers")
        }
    }

    // MARK: What bluetoothd and the dongle record

    mutating func simulatorEvent(_ event: SimulatorEvent, _ simulation: Simulation) {
        switch event.kind {
        case .hang:
            hangStartedAt = simulation.now
        case .sleep:
            count(.dongleNeverSleeps)
            if event.reason == "idle", !sleepExcused(simulation) {
                simulation.violated(
                    .dongleNeverSleeps,
                    "the dongle reached its idle-sleep deadline (\(settings.sleepAfter.roundedText) without a write) while \(state.rawValue)")
            }
        case .otherAdvertisers:
            otherAdvertisers = Int(event.reason ?? "") ?? otherAdvertisers
        default:
            break
        }
        if simulation.trace.wantsRoutine || event.kind != .notify && event.kind != .write {
            simulation.record(.simulator(event))
        }
    }

    /// No write reaches the dongle through a hung bluetoothd: a sleep while
    /// it hangs is Tether's fault only if a diligent Tether had its chance,
    /// that is unless the hang has lasted all but one keep-alive interval of
    /// `sleep_after`, or Tether started again (after a kill) within it.
    private func sleepExcused(_ simulation: Simulation) -> Bool {
        guard simulation.bluetoothdHung, let hangStartedAt else { return false }
        let now = simulation.now
        return now - hangStartedAt >= settings.sleepAfter - settings.keepaliveInterval - Invariant.keepaliveSlack
            || now - tetherStartedAt < settings.sleepAfter
    }

    /// The status's dated moments against the wall clock now: each must
    /// lie between Tether's start and now (both on the simulated wall clock
    /// as it reads now).
    mutating func checkStatusAges(_ simulation: Simulation) {
        guard tetherAlive, let status = simulation.tether?.service?.status else { return }
        count(.statusAgesMonotonic)
        let wall = simulation.wallClock
        let lived = Double((simulation.now - tetherStartedAt).wholeMilliseconds) / 1000
        let moments: [(String, Date?)] = [
            ("connected since", status.connectedSince), ("last reading", status.lastReadingAt),
            ("last drop", status.lastDisconnectAt), ("away since", status.awaySince),
        ]
        for case let (name, date?) in moments {
            let age = wall.timeIntervalSince(date)
            if age < -0.001 || age > lived + 0.001 {
                simulation.violated(
                    .statusAgesMonotonic,
                    "status's \(name) is \(age) s before the wall clock's reading; Tether has run \(lived) s")
                return
            }
        }
    }

    // MARK: After every instant

    mutating func checkInstant(_ simulation: Simulation) {
        let now = simulation.now
        guard tetherAlive else { return }

        count(.keepaliveGap)
        if let since = connection.subscribedSince, simulation.dongleConnected {
            let gap = now - max(lastPollAt, since)
            if gap > settings.keepaliveInterval + Invariant.keepaliveSlack {
                simulation.violated(.keepaliveGap, "no keep-alive for \(gap.simulationStamp) while \(state.rawValue)")
            }
        }

        count(.escalationStepBounded)
        if let step = connection.escalationStep, now - step.since > Invariant.escalationStepBound {
            simulation.violated(
                .escalationStepBounded,
                "escalation run \(step.run) has had no verdict for \((now - step.since).simulationStamp)")
            connection.escalationStep = nil
        }

        count(.onlineOnlyWhileDataFlows)
        if state == .online {
            let silent = lastNotificationAt.map { now - $0 }
            if silent.map({ $0 > settings.silenceLimit + Invariant.silenceSlack }) ?? true {
                simulation.violated(
                    .onlineOnlyWhileDataFlows,
                    "online with no notification for \(silent?.simulationStamp ?? "ever") (silence limit \(settings.silenceLimit.roundedText))")
            }
        }
    }

    /// Every fault cleared `recoveryBound` ago (and none since): Tether must be online.
    mutating func checkRecovery(_ simulation: Simulation, generation: UInt64) {
        guard generation == simulation.recoveryGeneration, tetherAlive else { return }
        count(.recoversAfterFaults)
        if state != .online {
            simulation.violated(
                .recoversAfterFaults, "\(state.rawValue), \(settings.recoveryBound.simulationStamp) after the last fault cleared")
        }
    }
}

extension Invariant {
    /// Its place in `allCases` (a table: this runs millions of times per seed).
    var index: Int { Self.indices[self] }

    private static let indices = IndexTable<Invariant>()
}

/// The position of each case of a small enum in `allCases`, looked up by
/// hash once per case instead of a linear search per call.
struct IndexTable<Case: CaseIterable & Hashable & Sendable>: Sendable {
    private let table: [Case: Int]

    init() {
        var table: [Case: Int] = [:]
        for (index, value) in Case.allCases.enumerated() { table[value] = index }
        self.table = table
    }

    subscript(_ value: Case) -> Int { table[value] ?? 0 }
}

/// What one bus connection of a Tether process has under way, as the
/// invariants follow it: calls awaiting their answer, what their answers
/// obliged, the subscription. A new process, a new connection after the bus
/// came back, and the process's end each start it afresh (their answers can
/// no longer come; a new connection asks anew).
private struct UnderWay {
    /// Connect calls awaiting bluetoothd's reply, by serial, with no
    /// Disconnect sent after them.
    var pendingConnects: Set<UInt32> = []
    /// A Connect was answered with a needs-cancel error; no Disconnect since.
    var cancelOwed: String?
    /// RemoveDevice calls awaiting their answer: serial → path.
    var removalsInFlight: [UInt32: String] = [:]
    /// Device objects whose RemoveDevice bluetoothd answered and whose
    /// InterfacesRemoved has not reached Tether yet: no Connect may name
    /// one (bluetoothd deleted it before answering; the signal follows from
    /// its idle loop).
    var removedUnsignalled: Set<String> = []
    /// The escalation step under way (its run) and when it began.
    var escalationStep: (run: Int, since: Duration)?
    /// Controller checks asked for and not answered yet (`no-power-cycle-before-the-verdict`).
    var controllerChecksOut: Set<Int> = []
    /// Since when the link has been subscribed (online or waiting for data).
    var subscribedSince: Duration?
}
