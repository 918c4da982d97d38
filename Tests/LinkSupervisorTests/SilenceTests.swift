@testable import LinkSupervisor
import Testing

/// The silence limit: only notifications prove the dongle works. Driven on a
/// virtual clock (`VirtualLink`); `.dataReceived` stands for a loop turn
/// that carried notifications.
@Suite struct SilenceTests {
    static func settings(limit: Duration = .seconds(30)) -> Supervisor.Settings {
        var settings = SupervisorTests.settings
        settings.silenceLimit = limit
        return settings
    }

    /// Subscribed at t=0 and the first notification right after: online.
    func notifyingLink(limit: Duration = .seconds(30)) -> VirtualLink {
        var link = VirtualLink(settings: Self.settings(limit: limit))
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .waitingForData)
        link.send(.dataReceived)
        #expect(link.state == .online)
        link.clearLog()
        return link
    }

    /// Sends a notification every `period` for `duration`.
    func notify(_ link: inout VirtualLink, every period: Duration, for duration: Duration) {
        let end = link.now + duration
        while link.now + period <= end {
            link.advance(by: period)
            link.send(.dataReceived)
        }
        link.advance(by: end - link.now)
    }

    func silenceReports(_ link: VirtualLink) -> [(Duration, Bool)] {
        link.log.compactMap { entry in
            if case .report(.silence(let silent, _, let proven)) = entry.action { return (silent, proven) }
            return nil
        }
    }

    @Test func subscribedIsNotOnlineUntilTheFirstNotification() {
        var link = VirtualLink(settings: Self.settings())
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .waitingForData)
        // The keep-alive runs while waiting: the dongle may only talk when polled.
        #expect(link.count { if case .poll = $0 { true } else { false } } == 1)
        #expect(link.count { if case .report(.connected) = $0 { true } else { false } } == 0)
        link.advance(by: .seconds(2))
        link.send(.dataReceived)
        #expect(link.state == .online)
        #expect(link.supervisor.status.connectedSince == .seconds(2))
        #expect(link.count { if case .report(.connected) = $0 { true } else { false } } == 1)
        // No second poll at once: the fixed-rate schedule goes on.
        #expect(link.count { if case .poll = $0 { true } else { false } } == 1)
    }

    @Test func withoutALimitTheSubscriptionIsOnline() {
        var link = VirtualLink(settings: SupervisorTests.settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
        link.advance(by: .seconds(600))
        #expect(link.state == .online)
        #expect(silenceReports(link).isEmpty)
    }

    @Test func aDongleNotifyingEveryTenSecondsNeverTripsAThirtySecondLimit() {
        var link = notifyingLink(limit: .seconds(30))
        notify(&link, every: .seconds(10), for: .seconds(600))
        #expect(link.state == .online)
        #expect(silenceReports(link).isEmpty)
        #expect(link.count { if case .disconnect = $0 { true } else { false } } == 0)
        // The lazy timer re-arms from the last notification instead of per reading.
        let silenceTimers = link.count { if case .startTimer(.silence, _) = $0 { true } else { false } }
        #expect(silenceTimers <= 31)  // one per 20 s at most, against 60 readings
    }

    @Test func aHungApplicationIsCaughtAtTheLimitAndTheLinkIsDroppedAndReconnected() {
        var link = notifyingLink(limit: .seconds(20))
        notify(&link, every: .seconds(1), for: .seconds(30))
        // The application hangs: no notification from t=30 on; the radio keeps the link.
        link.advance(by: .milliseconds(19_900))
        #expect(link.state == .online)
        link.advance(by: .milliseconds(100))
        #expect(silenceReports(link).map(\.0) == [.seconds(20)])
        #expect(silenceReports(link).map(\.1) == [true])
        #expect(link.state == .backingOff)
        #expect(link.count { if case .disconnect = $0 { true } else { false } } == 1)
        #expect(link.supervisor.status.silenceEvents == 1)
        #expect(link.supervisor.status.lastError?.contains("no notification for 20s") == true)
        // bluetoothd confirms the disconnect: a new window's first attempt comes at once.
        let before = link.connectTimes.count
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.connectTimes.count == before + 1)
        #expect(link.supervisor.status.windowAttempt == 1)
    }

    @Test func silenceRightAfterEachReconnectFailsTheAttemptsAndEscalatesWithinTheWindow() {
        var settings = Self.settings(limit: .seconds(10))
        settings.escalation = []
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        // Each forced disconnect is confirmed at once; the dongle never notifies.
        for _ in 0..<2000 {
            if link.state == .backingOff, link.supervisor.observation.connected {
                link.observe(VirtualLink.down)
            }
            if link.state == .coolingDown { break }
            link.advance(by: .milliseconds(500))
        }
        #expect(link.state == .coolingDown)
        let silences = silenceReports(link)
        #expect(!silences.isEmpty)
        #expect(silences.allSatisfy { !$0.1 })  // never proven
        let failed = link.count { if case .report(.attemptFailed) = $0 { true } else { false } }
        #expect(failed == silences.count)
        #expect(link.count { if case .report(.windowExhausted) = $0 { true } else { false } } == 1)
        // Bounded by the window: attempts and time.
        #expect(link.connectTimes.count <= SupervisorTests.policy.windowAttempts)
        #expect(link.connectTimes.last.map { $0 <= SupervisorTests.policy.window } == true)
        #expect(link.count { if case .report(.connected) = $0 { true } else { false } } == 0)
    }

    @Test func silenceWhileConnectingIsLeftToTheAttemptDeadline() {
        var link = VirtualLink(settings: Self.settings(limit: .seconds(5)))
        link.connectResult = nil  // the connect hangs
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        link.advance(by: .seconds(19))
        #expect(link.state == .connecting)
        #expect(silenceReports(link).isEmpty)
        link.advance(by: .seconds(1))
        #expect(silenceReports(link).isEmpty)
        #expect(link.count { if case .report(.attemptFailed) = $0 { true } else { false } } == 1)
    }

    @Test func silenceDuringAKeepAliveWriteDropsTheLinkAndTheLateAnswerIsIgnored() {
        var settings = Self.settings(limit: .seconds(11))
        settings.keepaliveTimeout = .seconds(5)
        var link = VirtualLink(settings: settings)
        link.pollResult = nil  // answered by hand below
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.send(.dataReceived)
        #expect(link.state == .online)
        var answered = 0
        func pollIDs(_ link: VirtualLink) -> [Int] {
            link.log.compactMap { if case .poll(let id, _) = $0.action { id } else { nil } }
        }
        // Polls are answered 2.5 s late; no notification after t=0.
        for _ in 0..<2 {
            link.advance(by: .milliseconds(2500))
            for id in pollIDs(link).dropFirst(answered) {
                link.send(.pollFinished(poll: id, .success(())))
                answered += 1
            }
            link.advance(by: .milliseconds(2500))
        }
        // t=10: a poll went out and is in flight when the limit passes at 11.
        #expect(link.state == .online)
        link.advance(by: .seconds(1))
        #expect(link.state == .backingOff)
        #expect(silenceReports(link).count == 1)
        let late = pollIDs(link).last ?? -1
        let actionsBefore = link.log.count
        link.send(.pollFinished(poll: late, .success(())))
        link.send(.pollFinished(poll: late, .failure(LinkFailure(.transient, "Not connected"))))
        #expect(link.log.count == actionsBefore)
        #expect(link.state == .backingOff)
    }

    @Test func silenceIsJudgedAcrossAReconnectFromTheNewSession() {
        var link = notifyingLink(limit: .seconds(20))
        notify(&link, every: .seconds(1), for: .seconds(15))
        // The link drops at t=15 and is back at once.
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .waitingForData)
        // The last notification of the old session (t=15) does not count: the
        // new session must produce its own within the limit of subscribing.
        link.advance(by: .milliseconds(19_999))
        #expect(link.state == .waitingForData)
        link.advance(by: .milliseconds(1))
        #expect(silenceReports(link).map(\.1) == [false])
        #expect(link.state == .backingOff)
    }

    @Test func notificationsBeforeTheSubscriptionCompletesMakeItOnlineAtOnce() {
        var link = VirtualLink(settings: Self.settings())
        link.connectResult = .success(())
        link.answerSubscribes = false
        link.observe(VirtualLink.down)
        #expect(link.state == .subscribing)
        // bluetoothd re-armed an old notify session: data before our subscribe reply.
        link.send(.dataReceived)
        link.send(.subscribeFinished(attempt: 2, .success(())))
        #expect(link.state == .online)
    }

    @Test func aDropWhileWaitingForDataIsAFailedAttemptOfTheSameWindow() {
        var link = VirtualLink(settings: Self.settings())
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .waitingForData)
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .backingOff)
        #expect(link.supervisor.status.nextAttemptAt != nil)
        link.advance(by: .seconds(2))
        #expect(link.state == .connecting)
        #expect(link.supervisor.status.windowAttempt == 2)
    }

    @Test func aReconnectRequestWhileWaitingForDataStartsAFreshWindow() {
        var link = VirtualLink(settings: Self.settings())
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .waitingForData)
        link.send(.reconnectRequested)
        #expect(link.state == .backingOff)
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.supervisor.status.windowAttempt == 1)
        #expect(link.answers == [.started(attempt: 1)])
    }

    @Test func theNotifySocketEndingWhileWaitingForDataIsADrop() {
        var link = VirtualLink(settings: Self.settings())
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.connectResult = nil
        link.send(.notificationsEnded("EOF"))
        #expect(link.state == .backingOff)
        #expect(link.count { if case .report(.disconnected(unexpected: true)) = $0 { true } else { false } } == 1)
    }
}
