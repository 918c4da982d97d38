import LinkSupervisor
import Readings
import TestSupport
import Testing

@testable import TetherDaemon

/// LinkMetrics against the supervisor's inputs and decisions, on a clock the
/// test drives: what each counter, gauge and histogram says after them.
@Suite struct LinkMetricsTests {
    let metrics = LinkMetrics(instanceName: "east", wallClock: { 1_700_000_000 })

    func samples() -> PrometheusSamples {
        PrometheusSamples(String(decoding: metrics.registry.exposition(), as: UTF8.self))
    }

    func status(_ state: SupervisorState, reconnects: Int = 0) -> Supervisor.Status {
        var status = Supervisor.Status()
        status.state = state
        status.reconnects = reconnects
        return status
    }

    @Test func everySeriesExistsFromTheStartWithTheInstanceLabel() {
        let s = samples()
        #expect(s.value("tether_connected", ["instance_name": "east"]) == 0)
        #expect(s.value("tether_state", ["state": "waiting-for-bluez"]) == 1)
        #expect(s.sum("tether_state") == 1, "one-hot")
        #expect(s.value("tether_reconnects_total") == 0)
        #expect(s.value("tether_connect_attempts_total", ["result": "failure", "error_class": "timeout"]) == 0)
        #expect(s.value("tether_escalations_total", ["step": "hci-reset", "result": "failed"]) == 0)
        #expect(s.value("tether_keepalive_polls_total", ["result": "timeout"]) == 0)
        #expect(s.value("tether_keepalive_poll_duration_seconds_count") == 0)
        #expect(s.samples.allSatisfy { $0.labels["instance_name"] == "east" })
    }

    @Test func connectToOnlineIsTimedFromTheSuccessfulAttemptsConnect() {
        metrics.observe(.timerFired(.retry), actions: [.connect(attempt: 1, timeout: .seconds(20))], status: status(.connecting), at: .seconds(10))
        metrics.observe(
            .connectFinished(attempt: 1, .success(())), actions: [], status: status(.resolving), at: .milliseconds(10_100)
        )
        metrics.observe(
            .subscribeFinished(attempt: 1, .success(())), actions: [.report(.connected(attempt: 1))],
            status: status(.online), at: .milliseconds(10_300)
        )
        let s = samples()
        #expect(s.value("tether_connect_attempts_total", ["result": "success"]) == 1)
        #expect(s.value("tether_connect_to_online_seconds_count") == 1)
        #expect(s.value("tether_connect_to_online_seconds_sum").map { abs($0 - 0.3) < 0.001 } == true)
        #expect(s.value("tether_connect_to_online_seconds_bucket", ["le": "0.25"]) == 0)
        #expect(s.value("tether_connect_to_online_seconds_bucket", ["le": "0.5"]) == 1)
        #expect(s.value("tether_connected") == 1)
        #expect(s.value("tether_connected_since_timestamp_seconds") == 1_700_000_000)
        #expect(s.value("tether_state", ["state": "online"]) == 1)
        #expect(s.sum("tether_state") == 1)
    }

    /// A step of the wall clock moves the "since" timestamps with it, so
    /// that `time() -` them stays the time since; unset ones stay 0.
    @Test func aStepOfTheWallClockMovesTheSinceTimestamps() {
        metrics.observe(
            .subscribeFinished(attempt: 1, .success(())), actions: [.report(.connected(attempt: 1))],
            status: status(.online), at: .seconds(5)
        )
        metrics.clockStepped(bySeconds: 86_400.5)
        var s = samples()
        #expect(s.value("tether_connected_since_timestamp_seconds") == 1_700_086_400.5)
        #expect(s.value("tether_dongle_away_since_timestamp_seconds") == 0, "not away: stays unset")
        metrics.clockStepped(bySeconds: -100_000)
        s = samples()
        #expect(s.value("tether_connected_since_timestamp_seconds") == 1_699_986_400.5)
    }

    @Test func failedAttemptsAreCountedByErrorClass() {
        let failures: [(SupervisorEvent, String)] = [
            (.connectFinished(attempt: 1, .failure(LinkFailure(.transient, "le-connection-abort-by-local"))), "transient"),
            (.connectFinished(attempt: 2, .failure(LinkFailure(.needsCancel, "InProgress"))), "in-progress"),
            (.subscribeFinished(attempt: 3, .failure(LinkFailure(.fatal, "NotPermitted"))), "fatal"),
            (.timerFired(.attemptDeadline), "timeout"),
            (.notificationsEnded("EOF"), "link-lost"),
        ]
        for (index, (event, _)) in failures.enumerated() {
            metrics.observe(
                event, actions: [.report(.attemptFailed(attempt: index + 1, error: "x"))], status: status(.backingOff),
                at: .seconds(index)
            )
        }
        let s = samples()
        for (_, errorClass) in failures {
            #expect(s.value("tether_connect_attempts_total", ["result": "failure", "error_class": errorClass]) == 1, "\(errorClass)")
        }
        #expect(s.value("tether_connect_attempts_total", ["result": "success"]) == 0)
    }

    @Test func pollsAreCountedByResultAndTimedWhenAnswered() {
        metrics.observe(.timerFired(.keepalive), actions: [.poll(1, timeout: .seconds(3))], status: status(.online), at: .seconds(1))
        metrics.observe(.pollFinished(poll: 1, .success(())), actions: [], status: status(.online), at: .milliseconds(1_020))
        metrics.observe(.timerFired(.keepalive), actions: [.poll(2, timeout: .seconds(3))], status: status(.online), at: .seconds(2))
        metrics.observe(.timerFired(.pollDeadline), actions: [], status: status(.online), at: .seconds(5))
        // The late answer of the poll that timed out is not counted again.
        metrics.observe(.pollFinished(poll: 2, .success(())), actions: [], status: status(.online), at: .seconds(6))
        metrics.observe(.timerFired(.keepalive), actions: [.poll(3, timeout: .seconds(3))], status: status(.online), at: .seconds(7))
        metrics.observe(
            .pollFinished(poll: 3, .failure(LinkFailure(.transient, "Not connected"))), actions: [], status: status(.online),
            at: .milliseconds(7_005)
        )
        metrics.observe(.timerFired(.keepalive), actions: [.pollWithoutReply], status: status(.online), at: .seconds(8))
        metrics.observe(.timerFired(.keepalive), actions: [.pollWithoutReply], status: status(.online), at: .seconds(9))
        let s = samples()
        #expect(s.value("tether_keepalive_polls_total", ["result": "ok"]) == 1)
        #expect(s.value("tether_keepalive_polls_total", ["result": "timeout"]) == 1)
        #expect(s.value("tether_keepalive_polls_total", ["result": "failed"]) == 1)
        #expect(s.value("tether_keepalive_polls_total", ["result": "sent"]) == 2)
        #expect(s.value("tether_keepalive_poll_duration_seconds_count") == 1)
        #expect(s.value("tether_keepalive_poll_duration_seconds_bucket", ["le": "0.01"]) == 0)
        #expect(s.value("tether_keepalive_poll_duration_seconds_bucket", ["le": "0.025"]) == 1)
    }

    @Test func reconnectsWindowsEscalationsAndRestartsAreCounted() {
        metrics.observe(.reconnectRequested, actions: [], status: status(.online, reconnects: 2), at: .seconds(1))
        metrics.observe(
            .timerFired(.retry), actions: [.report(.windowExhausted(attempts: 12))], status: status(.escalating, reconnects: 2),
            at: .seconds(2)
        )
        metrics.observe(.escalationFinished(.powerCycle, run: 1, .success(())), actions: [], status: status(.escalating, reconnects: 2), at: .seconds(3))
        metrics.observe(
            .escalationFinished(.hciReset, run: 2, .failure(LinkFailure(.transient, "no adapter"))), actions: [],
            status: status(.coolingDown, reconnects: 2), at: .seconds(4)
        )
        metrics.observe(.reconnectRequested, actions: [.report(.bluezAppeared)], status: status(.searching, reconnects: 2), at: .seconds(5))
        // After a D-Bus reconnect the link service's supervisor counts from 0: the counter goes on.
        metrics.observe(.reconnectRequested, actions: [], status: status(.online, reconnects: 1), at: .seconds(6))
        let s = samples()
        #expect(s.value("tether_reconnects_total") == 3)
        #expect(s.value("tether_window_exhaustions_total") == 1)
        #expect(s.value("tether_escalations_total", ["step": "power-cycle", "result": "ok"]) == 1)
        #expect(s.value("tether_escalations_total", ["step": "hci-reset", "result": "failed"]) == 1)
        #expect(s.value("tether_bluetoothd_restarts_total") == 1)
    }

    @Test func readingsComeFromTheRecordersCountersAndAStopLeavesNothingOnline() {
        metrics.refresh(readings: ReadingRecorder.Stats(written: 100, dropped: 0))
        metrics.refresh(readings: ReadingRecorder.Stats(written: 250, dropped: 7, gapRecords: 2))
        metrics.observe(.reconnectRequested, actions: [], status: status(.online), at: .seconds(1))
        metrics.stopped()
        let s = samples()
        #expect(s.value("tether_readings_pending") == 0)
        #expect(s.value("tether_readings_log_failing") == 0)
        #expect(s.value("tether_readings_total") == 250)
        #expect(s.value("tether_readings_dropped_total") == 7)
        #expect(s.value("tether_gap_records_total") == 2)
        #expect(s.value("tether_connected") == 0)
        #expect(s.sum("tether_state") == 0)
    }

    @Test func aReadingsLogThatRefusesWritesIsShownUntilAWriteSucceeds() {
        metrics.refresh(readings: ReadingRecorder.Stats(written: 40, pending: 3))
        #expect(samples().value("tether_readings_log_failing") == 0)
        metrics.refresh(readings: ReadingRecorder.Stats(written: 40, pending: 512, lastError: "Read-only file system"))
        var s = samples()
        #expect(s.value("tether_readings_log_failing") == 1)
        #expect(s.value("tether_readings_pending") == 512)
        metrics.refresh(readings: ReadingRecorder.Stats(written: 552, pending: 0))
        s = samples()
        #expect(s.value("tether_readings_log_failing") == 0)
        #expect(s.value("tether_readings_pending") == 0)
        #expect(s.value("tether_readings_total") == 552)
    }

    @Test func silencesRemovalsDisconnectReasonsAndAFailedControllerAreShown() {
        var s = samples()
        #expect(s.value("tether_silence_events_total") == 0)
        #expect(s.value("tether_disconnects_total", ["reason": "connection-timeout"]) == 0)
        #expect(s.value("tether_controller_init_failed") == 0)
        metrics.observe(
            .timerFired(.silence),
            actions: [.report(.silence(silentFor: .seconds(20), limit: .seconds(20), proven: true))],
            status: status(.backingOff), at: .seconds(30)
        )
        metrics.observe(
            .timerFired(.retry), actions: [.report(.staleDeviceRemoved(failures: 4, lastError: "le-connection-abort-by-local"))],
            status: status(.searching), at: .seconds(60)
        )
        metrics.disconnected(reason: .local)
        metrics.disconnected(reason: .connectionTimeout)
        metrics.disconnected(reason: .connectionTimeout)
        metrics.disconnected(reason: .unavailable)
        metrics.controllerInitFailed(true)
        s = samples()
        #expect(s.value("tether_silence_events_total") == 1)
        #expect(s.value("tether_stale_device_removals_total") == 1)
        #expect(s.value("tether_disconnects_total", ["reason": "local"]) == 1)
        #expect(s.value("tether_disconnects_total", ["reason": "connection-timeout"]) == 2)
        #expect(s.value("tether_disconnects_total", ["reason": "unavailable"]) == 1)
        #expect(s.value("tether_disconnects_total", ["reason": "remote"]) == 0)
        #expect(s.value("tether_controller_init_failed") == 1)
        metrics.controllerInitFailed(false)
        #expect(samples().value("tether_controller_init_failed") == 0)
    }
}

extension LinkMetrics {
    /// One step as `LinkService.carryOut` records it when the status may have
    /// changed: the event and its actions, then the status.
    func observe(_ event: SupervisorEvent, actions: [SupervisorAction], status: Supervisor.Status, at now: Duration) {
        observe(event, actions: actions, at: now)
        observe(status, at: now)
    }
}
