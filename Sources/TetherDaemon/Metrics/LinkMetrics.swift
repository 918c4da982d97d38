import CoreMetrics
import DurationUnits
import FoundationEssentials
import LinkPolicy
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkSupervisor
import MetricsTextfile
import Readings
import Synchronization

/// `tether run`'s metrics, recorded from what the supervisor is handed and
/// what it decides (`observe`), from each loop turn's readings, and from the
/// recorder's counters when the textfile is written (`refresh`).
///
/// Names follow Prometheus's conventions: counters end in `_total`,
/// durations are histograms in `_seconds`, timestamps are
/// `_timestamp_seconds` since the Unix epoch; every series has the
/// `instance_name` label. Every labelled series exists from the start (at
/// 0), so `rate()` and `absent()` work from the first scrape.
///
/// Threading: `observe` and `readingsTaken` run on the link service's loop
/// only (the pending polls and the connect start are loop-confined);
/// `refresh` runs on the exporter's task. The instruments are thread-safe.
public final class LinkMetrics: @unchecked Sendable {
    // @unchecked: `pollStarts`, `connectStartedAt`, `lastState` and
    // `lastReconnects` are touched on the link service's loop only;
    // `exportedReadings` is a Mutex.

    public let registry: MetricsRegistry
    private let wallClock: @Sendable () -> Double

    private let connected: Meter
    private let stateGauges: [SupervisorState: Meter]
    private let connectedSince: Meter
    private let awaySince: Meter
    /// What `connectedSince` and `awaySince` hold (0: unset), to move them
    /// with a step of the wall clock (loop-confined).
    private var connectedSinceValue: Double = 0
    private var awaySinceValue: Double = 0
    private let awaySpells: CoreMetrics.Counter
    private let inBootloader: Meter
    private let reconnects: CoreMetrics.Counter
    private let attempts: [AttemptOutcome: CoreMetrics.Counter]
    private let windowExhaustions: CoreMetrics.Counter
    private let escalations: [EscalationKey: CoreMetrics.Counter]
    private let bluetoothdRestarts: CoreMetrics.Counter
    private let readings: CoreMetrics.Counter
    private let readingsDropped: CoreMetrics.Counter
    private let gapRecords: CoreMetrics.Counter
    private let readingsPending: Meter
    private let readingsLogFailing: Meter
    private let lastReading: Meter
    private let polls: [PollResult: CoreMetrics.Counter]
    private let pollsSent: CoreMetrics.Counter
    private let pollLatency: CoreMetrics.Timer
    private let connectToOnline: CoreMetrics.Timer
    private let silenceEvents: CoreMetrics.Counter
    private let staleDeviceRemovals: CoreMetrics.Counter
    private let pairings: [Bool: CoreMetrics.Counter]
    private let bondsLost: CoreMetrics.Counter
    private let disconnects: [DisconnectReasons.Reason: CoreMetrics.Counter]
    private let controllerInitFailures: Meter
    private let radioBlocks: [RadioBlock: Meter]
    private let busSignalsDropped: CoreMetrics.Counter
    private let busCallsRefused: CoreMetrics.Counter
    /// What `refresh(unreadDrops:)` last brought the two counters to.
    private let exportedUnreadDrops = Mutex((signals: 0, calls: 0))

    // MARK: Loop-confined
    private var pollStarts: [Int: Duration] = [:]
    private var connectStartedAt: Duration?
    /// The state the one-hot gauges show (a new supervisor starts waiting for bluetoothd).
    private var lastState = SupervisorState.waitingForBluez
    private var lastReconnects = 0

    // MARK: The exporter's
    private let exportedReadings = Mutex(ReadingRecorder.Stats())

    /// Why an attempt failed, as a label: the kind of BlueZ error, or what
    /// ended it otherwise.
    enum AttemptOutcome: String, CaseIterable {
        case success = "none"
        case transient
        case inProgress = "in-progress"
        case fatal
        case timeout
        case linkLost = "link-lost"
        /// Subscribed, but no notification within the silence limit.
        case silence
        case other
    }

    enum PollResult: String, CaseIterable {
        case ok, failed, timeout
        /// Sent without asking for an answer (`keepalive.confirm_every`).
        case sent
    }

    struct EscalationKey: Hashable {
        var step: String
        var result: String
    }

    static let pollBuckets: [Duration] = [
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
    ]
    static let onlineBuckets: [Duration] = [
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
        .milliseconds(2500), .seconds(5), .seconds(10), .seconds(20), .seconds(30),
    ]

    public init(instanceName: String, wallClock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        let registry = MetricsRegistry(instanceName: instanceName)
        self.registry = registry
        self.wallClock = wallClock
        connected = registry.gauge("tether_connected", help: "1 while the dongle is online (subscribed, polled, and notifying within the silence limit), else 0.")
        var states: [SupervisorState: Meter] = [:]
        for state in SupervisorState.allCases {
            states[state] = registry.gauge(
                "tether_state", help: "The supervisor's state, one-hot: 1 for the current state, 0 for the others.",
                labels: [("state", state.rawValue)]
            )
        }
        stateGauges = states
        connectedSince = registry.gauge(
            "tether_connected_since_timestamp_seconds",
            help: "When the dongle last came online, in seconds since the Unix epoch; 0 while it is not online."
        )
        awaySince = registry.gauge(
            "tether_dongle_away_since_timestamp_seconds",
            help: "While the dongle is away (not seen, the controller working), since when, in seconds since the Unix epoch; 0 otherwise. time() minus it is how long it has been away."
        )
        awaySpells = registry.counter(
            "tether_dongle_away_total", help: "Times the dongle was found away (a retry window found nobody while the controller worked), not escalated."
        )
        inBootloader = registry.gauge(
            "tether_dongle_in_bootloader",
            help: "1 while the dongle's Nordic DFU bootloader advertises (DfuTarg at its address plus one: a firmware update) and the dongle does not; 0 otherwise."
        )
        reconnects = registry.counter(
            "tether_reconnects_total", help: "Times the link came back after being lost (the control API's Reconnects)."
        )
        var attempts: [AttemptOutcome: CoreMetrics.Counter] = [:]
        for outcome in AttemptOutcome.allCases {
            attempts[outcome] = registry.counter(
                "tether_connect_attempts_total",
                help: "Connect attempts that ended, by result (success, failure) and error class of a failure.",
                labels: [("result", outcome == .success ? "success" : "failure"), ("error_class", outcome.rawValue)]
            )
        }
        self.attempts = attempts
        windowExhaustions = registry.counter(
            "tether_window_exhaustions_total", help: "Retry windows that ended without the dongle coming online."
        )
        var escalations: [EscalationKey: CoreMetrics.Counter] = [:]
        for step in EscalationStep.allCases.map(\.rawValue) {
            for result in ["ok", "failed"] {
                escalations[EscalationKey(step: step, result: result)] = registry.counter(
                    "tether_escalations_total", help: "Escalation steps run, after an exhausted window or to recover an unusable adapter, by step and result.",
                    labels: [("step", step), ("result", result)]
                )
            }
        }
        self.escalations = escalations
        bluetoothdRestarts = registry.counter(
            "tether_bluetoothd_restarts_total", help: "Times bluetoothd came back on the bus after it had gone."
        )
        readings = registry.counter("tether_readings_total", help: "Readings written to the readings log.")
        readingsDropped = registry.counter(
            "tether_readings_dropped_total",
            help: "Readings dropped because the disk refused writes longer than the backlog lasted (what gap records count)."
        )
        gapRecords = registry.counter(
            "tether_gap_records_total", help: "Gap records written to the readings log, each for a run of dropped readings."
        )
        readingsPending = registry.gauge(
            "tether_readings_pending",
            help: "Readings received but not yet on disk: a few in normal running; they pile up while the disk refuses writes."
        )
        readingsPending.set(0)
        readingsLogFailing = registry.gauge(
            "tether_readings_log_failing",
            help: "1 while the readings log refuses writes (a read-only or full file system, an I/O error) and readings wait in memory; else 0."
        )
        readingsLogFailing.set(0)
        lastReading = registry.gauge(
            "tether_last_reading_timestamp_seconds",
            help: "When the last reading arrived, in seconds since the Unix epoch; 0 before the first."
        )
        func pollCounter(_ result: PollResult) -> CoreMetrics.Counter {
            registry.counter(
                "tether_keepalive_polls_total", help: "Keep-alive polls of the dongle, by result: ok, failed, timeout, or sent (without asking bluetoothd for an answer).",
                labels: [("result", result.rawValue)]
            )
        }
        var polls: [PollResult: CoreMetrics.Counter] = [:]
        for result in PollResult.allCases where result != .sent { polls[result] = pollCounter(result) }
        self.polls = polls
        // Apart: counted once a second on an idle link, with no look-up.
        pollsSent = pollCounter(.sent)
        pollLatency = registry.durationHistogram(
            "tether_keepalive_poll_duration_seconds", help: "How long a keep-alive poll that was answered took.",
            buckets: Self.pollBuckets
        )
        connectToOnline = registry.durationHistogram(
            "tether_connect_to_online_seconds",
            help: "From the Connect call of the attempt that succeeded to online (connected, resolved, subscribed).",
            buckets: Self.onlineBuckets
        )
        silenceEvents = registry.counter(
            "tether_silence_events_total",
            help: "Times no notification came for dongle.silence_limit while subscribed, and the link was dropped for it."
        )
        staleDeviceRemovals = registry.counter(
            "tether_stale_device_removals_total",
            help: "Times the dongle's device object was removed (Adapter1.RemoveDevice) after a retry window failed with errors pointing at a stale object."
        )
        var pairings: [Bool: CoreMetrics.Counter] = [:]
        for ok in [true, false] {
            pairings[ok] = registry.counter(
                "tether_pairings_total",
                help: "Device1.Pair calls Tether made (dongle.pairing), by result.",
                labels: [("result", ok ? "ok" : "failed")]
            )
        }
        self.pairings = pairings
        bondsLost = registry.counter(
            "tether_bonds_lost_total",
            help: "Times the dongle refused the bond bluetoothd holds for it (it lost its keys), once per outage."
        )
        busSignalsDropped = registry.counter(
            "tether_dbus_dropped_unread_total",
            help: "D-Bus messages dropped from their header alone, never decoded: signals no match rule admits (not from bluetoothd or the bus driver, or of the wrong shape) and method calls nothing serves or from a caller with too many in flight. Any local user may send them: a steady rise is someone on the box flooding or forging.",
            labels: [("kind", "signal")]
        )
        busCallsRefused = registry.counter(
            "tether_dbus_dropped_unread_total",
            help: "D-Bus messages dropped from their header alone, never decoded: signals no match rule admits (not from bluetoothd or the bus driver, or of the wrong shape) and method calls nothing serves or from a caller with too many in flight. Any local user may send them: a steady rise is someone on the box flooding or forging.",
            labels: [("kind", "call")]
        )
        var disconnects: [DisconnectReasons.Reason: CoreMetrics.Counter] = [:]
        for reason in DisconnectReasons.Reason.allCases {
            disconnects[reason] = registry.counter(
                "tether_disconnects_total",
                help: "Links that dropped, by the reason the kernel or bluetoothd gave (unavailable: neither said).",
                labels: [("reason", reason.rawValue)]
            )
        }
        self.disconnects = disconnects
        controllerInitFailures = registry.gauge(
            "tether_controller_init_failed",
            help: "1 while the configured controller is in the kernel but failed its initialisation, so bluetoothd has no adapter for it; else 0."
        )
        controllerInitFailures.set(0)
        var radioBlocks: [RadioBlock: Meter] = [:]
        for block in [RadioBlock.soft, .hard] {
            let gauge = registry.gauge(
                "tether_adapter_rfkill_blocked",
                help: "1 while rfkill blocks the adapter's controller, by kind (soft: software can clear it; hard: a switch); else 0.",
                labels: [("kind", block.rawValue)]
            )
            gauge.set(0)
            radioBlocks[block] = gauge
        }
        self.radioBlocks = radioBlocks
        connected.set(0)
        connectedSince.set(0)
        awaySince.set(0)
        inBootloader.set(0)
        lastReading.set(0)
        for (state, gauge) in stateGauges { gauge.set(state == lastState ? 1 : 0) }
    }

    // MARK: On the loop

    /// After the supervisor handled `event` at `now` (its clock) and decided `actions`.
    func observe(_ event: SupervisorEvent, actions: [SupervisorAction], at now: Duration) {
        switch event {
        case .pollFinished(let poll, let result):
            // A poll that already timed out was counted then.
            if let started = pollStarts.removeValue(forKey: poll) {
                switch result {
                case .success:
                    polls[.ok]?.increment()
                    pollLatency.recordNanoseconds((now - started).wholeNanoseconds)
                case .failure:
                    polls[.failed]?.increment()
                }
            }
        case .timerFired(.pollDeadline):
            if let oldest = pollStarts.keys.min() {
                pollStarts[oldest] = nil
                polls[.timeout]?.increment()
            }
        case .escalationFinished(let step, _, let result):
            let key = EscalationKey(step: step.rawValue, result: (try? result.get()) != nil ? "ok" : "failed")
            escalations[key]?.increment()
        default:
            break
        }
        for action in actions {
            switch action {
            case .poll(let poll, _):
                pollStarts[poll] = now
            case .pollWithoutReply:
                pollsSent.increment()
            case .connect:
                connectStartedAt = now
            case .report(.connected):
                attempts[.success]?.increment()
                if let started = connectStartedAt {
                    connectToOnline.recordNanoseconds((now - started).wholeNanoseconds)
                }
                connectStartedAt = nil
            case .report(.attemptFailed):
                attempts[Self.failureClass(of: event)]?.increment()
                connectStartedAt = nil
            case .report(.windowExhausted):
                windowExhaustions.increment()
            case .report(.dongleAway):
                awaySpells.increment()
            case .report(.bluezAppeared):
                bluetoothdRestarts.increment()
            case .report(.silence):
                silenceEvents.increment()
            case .report(.staleDeviceRemoved):
                staleDeviceRemovals.increment()
            case .report(.paired):
                pairings[true]?.increment()
            case .report(.pairingFailed):
                pairings[false]?.increment()
            case .report(.bondLost):
                bondsLost.increment()
            default:
                break
            }
        }
    }

    /// The supervisor's status after a step that may have changed it (one
    /// with a transition or a report), at `now` on the supervisor's clock.
    func observe(_ status: Supervisor.Status, at now: Duration) {
        // A new supervisor (the link service is made anew after a D-Bus
        // reconnect) counts from 0 again; the counter goes on.
        if status.reconnects < lastReconnects { lastReconnects = 0 }
        if status.reconnects > lastReconnects {
            reconnects.increment(by: status.reconnects - lastReconnects)
            lastReconnects = status.reconnects
        }
        if status.state != lastState {
            stateGauges[lastState]?.set(0)
            stateGauges[status.state]?.set(1)
            if status.state == .online {
                connected.set(1)
                connectedSinceValue = wallClock()
                connectedSince.set(connectedSinceValue)
            } else if lastState == .online {
                connected.set(0)
                connectedSinceValue = 0
                connectedSince.set(0)
            }
            if status.state == .away, let since = status.awaySince {
                awaySinceValue = wallClock() - Double((now - since).components.seconds)
                awaySince.set(awaySinceValue)
            } else if lastState == .away {
                awaySinceValue = 0
                awaySince.set(0)
            }
            // Polls run while waiting for data and while online; a poll
            // still out when the link went is never answered.
            if status.state != .online && status.state != .waitingForData { pollStarts.removeAll() }
            lastState = status.state
        }
    }

    /// The wall clock was set by `seconds` (`ClockSetWatch`): the moments
    /// kept as timestamps move with it, so that `time() - …_since_timestamp_seconds`
    /// stays the time since, not since plus the step (56 years, after NTP's
    /// first answer on a board that booted at 1970). On the loop.
    func clockStepped(bySeconds seconds: Double) {
        if connectedSinceValue != 0 {
            connectedSinceValue += seconds
            connectedSince.set(connectedSinceValue)
        }
        if awaySinceValue != 0 {
            awaySinceValue += seconds
            awaySince.set(awaySinceValue)
        }
    }

    /// The dongle's DFU bootloader began or stopped advertising in its place.
    func observeBootloader(_ advertising: Bool) {
        inBootloader.set(advertising ? 1 : 0)
    }

    /// A drop was logged with `reason`.
    func disconnected(reason: DisconnectReasons.Reason) {
        disconnects[reason]?.increment()
    }

    /// The configured controller failed its initialisation (true), or no longer looks so.
    func controllerInitFailed(_ failed: Bool) {
        controllerInitFailures.set(failed ? 1 : 0)
    }

    /// The rfkill block on the adapter's controller now.
    func radioBlock(_ block: RadioBlock) {
        for (kind, gauge) in radioBlocks { gauge.set(kind == block ? 1 : 0) }
    }

    /// A loop turn's readings were handed to the recorder; the last arrived at `at`.
    func readingsTaken(lastAt: Date) {
        lastReading.set(lastAt.timeIntervalSince1970)
    }

    static func failureClass(of event: SupervisorEvent) -> AttemptOutcome {
        switch event {
        case .connectFinished(_, .failure(let failure)), .subscribeFinished(_, .failure(let failure)):
            switch failure.kind {
            case .transient: .transient
            case .needsCancel: .inProgress
            case .fatal: .fatal
            }
        case .timerFired(.attemptDeadline): .timeout
        case .timerFired(.silence): .silence
        case .observed, .notificationsEnded: .linkLost
        default: .other
        }
    }

    // MARK: On the exporter's task

    /// The daemon stopped (its link service ended): the file it leaves
    /// behind must not say "online" while nothing keeps the dongle awake.
    /// Every state gauge goes to 0; `node_textfile_mtime_seconds` tells how
    /// old the file is.
    public func stopped() {
        connected.set(0)
        connectedSince.set(0)
        awaySince.set(0)
        for gauge in stateGauges.values { gauge.set(0) }
    }

    /// Brings the dropped-unread counters up to the daemon's bus
    /// connections' (all of them since start).
    public func refresh(unreadDrops drops: (signals: Int, calls: Int)) {
        let before = exportedUnreadDrops.withLock { exported in
            defer { exported = drops }
            return exported
        }
        busSignalsDropped.advance(to: UInt64(max(0, drops.signals)), from: UInt64(max(0, before.signals)))
        busCallsRefused.advance(to: UInt64(max(0, drops.calls)), from: UInt64(max(0, before.calls)))
    }

    /// Brings the readings counters and gauges up to the recorder's.
    public func refresh(readings stats: ReadingRecorder.Stats) {
        let before = exportedReadings.withLock { exported in
            defer { exported = stats }
            return exported
        }
        readings.advance(to: stats.written, from: before.written)
        readingsDropped.advance(to: stats.dropped, from: before.dropped)
        gapRecords.advance(to: stats.gapRecords, from: before.gapRecords)
        readingsPending.set(Int64(stats.pending))
        readingsLogFailing.set(stats.lastError == nil ? 0 : 1)
    }
}
