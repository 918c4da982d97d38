/// The invariants checked after every step of every seed. Raw values are the
/// names printed with a violation (and listed in docs/development.md, "Deterministic
/// simulation"); `statement` is what each promises, bounds included.
public enum Invariant: String, CaseIterable, Sendable {
    case readingsExactlyOnce = "readings-exactly-once"
    case readingsDatable = "readings-datable"
    case keepaliveGap = "keepalive-gap"
    case dongleNeverSleeps = "dongle-never-sleeps"
    case onlineOnlyWhileDataFlows = "online-only-while-data-flows"
    case retryWindowBounded = "retry-window-bounded"
    case callOrder = "call-order"
    case boundedActions = "bounded-actions"
    case recoversAfterFaults = "recovers-after-faults"
    case escalationStepBounded = "escalation-step-bounded"
    case noPowerCycleBeforeTheVerdict = "no-power-cycle-before-the-verdict"
    case stopDrains = "stop-drains"
    case statusTold = "status-told"
    case statusAgesMonotonic = "status-ages-monotonic"
    case believesOnlyBluetoothd = "believes-only-bluetoothd"
    case ownDongleOnly = "own-dongle-only"
    case quietAmongMany = "quiet-among-many"
    case simulationSetUp = "set-up"

    public var statement: String {
        switch self {
        case .readingsExactlyOnce:
            "every reading bluetoothd delivered to Tether is in the log exactly once, in order, every line readable, "
                + "seqs strictly increasing; excused only: readings delivered within flush_interval before a kill, readings "
                + "held in memory because the disk refused them when Tether was killed or stopped, and readings dropped "
                + "from a full backlog (then gap records count exactly as many)"
        case .readingsDatable:
            "every reading's record carries boot_ms read together with its ts: ts − boot_ms is the simulated boot's "
                + "start (to the millisecond) exactly when the record says clock_synced (the wall clock not moved), so a "
                + "backend re-dates every record of the boot by the rule in docs/operations.md"
        case .keepaliveGap:
            "while the link is up and subscribed (waiting-for-data or online), no keep-alive gap exceeds "
                + "keepalive.interval + \(Self.keepaliveSlack.simulationStamp)"
        case .dongleNeverSleeps:
            "the dongle never reaches its idle-sleep deadline (keepalive.sleep_after without a write) while connected; "
                + "excused only while bluetoothd hangs (no write gets through it) when the hang has lasted sleep_after "
                + "less one keep-alive interval, or Tether started again within sleep_after"
        case .onlineOnlyWhileDataFlows:
            "the state is online only if a notification came within silence_limit + \(Self.silenceSlack.simulationStamp)"
        case .retryWindowBounded:
            "no attempt of a retry window is numbered above window_attempts, and none starts window or more after the window's first"
        case .callOrder:
            "toward bluetoothd: no Connect while one of this process is pending with no Disconnect sent after it "
                + "(bluetoothd serves a client's calls in order: that Disconnect cancels it first); after a Connect answered with a "
                + "needs-cancel error (InProgress), a Disconnect before the next Connect; no Connect while the supervisor "
                + "saw bluetoothd away or the adapter unusable, nor on a device object it removed (RemoveDevice answered) before "
                + "bluetoothd signalled the removal; StartNotify only on a link seen connected, resolved and "
                + "with its characteristics; keep-alive writes only while subscribed"
        case .boundedActions:
            "at most \(Self.maximumCallsPerSecond) calls to bluetoothd in any whole simulated second (no busy loop)"
        case .recoversAfterFaults:
            "once every fault has cleared (and Tether runs), online within cooldown + window + connect_timeout + "
                + "\(Self.recoverySlack.simulationStamp)"
        case .escalationStepBounded:
            "every escalation step begun gets its verdict within \(Self.escalationStepBound.simulationStamp) while the "
                + "supervisor is escalating (a power cycle's calls and pauses, then at most 15 s for the adapter to show "
                + "powered): a step whose adapter never comes back is judged failed, and the next step runs"
        case .noPowerCycleBeforeTheVerdict:
            "no power cycle (which goes through the controller) begins while a controller check of the outage is "
                + "unanswered: its answer decides whether the power cycle runs"
        case .stopDrains:
            "a stop (SIGTERM) with a working disk leaves nothing unwritten: every reading delivered is in the log"
        case .statusTold:
            "the keep-alive's own steps (its timer, a poll's answer or deadline, a turn's notifications) that decide "
                + "only timers and polls leave the supervisor's status (what tether status shows) as it was: the daemon "
                + "skips its status bookkeeping after them (Supervisor.leavesStatusAsItWas)"
        case .statusAgesMonotonic:
            "the moments the status dates (connected since, last reading, last drop, away since) are never in the "
                + "future of the wall clock nor older than Tether's process, however the wall clock jumped: their ages "
                + "come from the monotonic clock (checked at each wall-clock-jump and each change of the status)"
        case .believesOnlyBluetoothd:
            "no reading but the dongle's reaches the log (a local user's forged notifications do not), and the "
                + "supervisor never hears that bluetoothd left the bus while it owns org.bluez (a forged NameOwnerChanged)"
        case .ownDongleOnly:
            "found by name, once bound to its dongle (online with it once), Tether never connects to another device, "
                + "however strong (an identical dongle of another vehicle nearby)"
        case .quietAmongMany:
            "among 80 or more advertisers, once the dongle's address is known, at most \(Self.maximumSignalsPerMinute) "
                + "(or 1 in \(Self.streetShare) of the street's reports, if more) PropertiesChanged signals of other devices "
                + "(one per advertisement heard, unfiltered) reach Tether in any simulated minute "
                + "(its match rules keep the street out; a new device's InterfacesAdded comes once)"
        case .simulationSetUp:
            "the simulated bluetoothd and the bus come up (a failure here is the simulation's, not Tether's)"
        }
    }

    /// The first poll after subscribing goes out at once; later ones every interval exactly.
    static let keepaliveSlack: Duration = .seconds(1)
    static let silenceSlack: Duration = .seconds(1)
    static let maximumCallsPerSecond = 25
    /// The dongle's notifications (at most 15 a minute here), the keep-alive's
    /// replies (12), a sample of the street every 10 s (6), and room for a drop.
    static let maximumSignalsPerMinute = 120
    /// Among more advertisers: at most this fraction (1 in 5) of the street's reports.
    static let streetShare = 5
    /// A power cycle's four calls (each at most `BlueZClient.callTimeout`,
    /// 10 s, with a hung bluetoothd), its pauses (2.5 s) and the adapter's
    /// 15 s at most make 57.5 s; the bound is about twice that, slack so
    /// that only a step left without its deadline fails it.
    static let escalationStepBound: Duration = .seconds(120)
    /// Subscribing, the first notification (at most one burst period, 10 s), escalation steps (~11 s each).
    static let recoverySlack: Duration = .seconds(60)
}

/// An invariant that did not hold, and when.
public struct Violation: Sendable, Equatable {
    public var invariant: Invariant
    public var at: Duration
    public var detail: String
}
