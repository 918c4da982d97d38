import LinkPolicy
@testable import LinkSupervisor
import Testing

@Suite struct SupervisorTests {
    static let policy = ReconnectPolicy(
        firstDelay: .zero, initialBackoff: .seconds(1), maxBackoff: .seconds(30), jitter: 0.2,
        connectTimeout: .seconds(20), window: .seconds(180), windowAttempts: 12, cooldown: .seconds(300)
    )
    static let settings = Supervisor.Settings(
        policy: policy, keepaliveInterval: .seconds(5), keepaliveTimeout: .seconds(3),
        escalation: [.powerCycle, .hciReset]
    )

    static let abort = LinkFailure(.transient, "le-connection-abort-by-local")

    /// A link whose dongle refuses every connection, started with `escalation`
    /// steps and run for `duration`.
    func refusingLink(escalation: [EscalationStep] = [], running duration: Duration = .zero) -> VirtualLink {
        var settings = Self.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(Self.abort)
        link.controllerCheckAnswer = .unknown("not asked here")
        link.observe(VirtualLink.down)
        link.advance(by: duration)
        return link
    }

    /// A link that is online at t=0.
    func onlineLink(settings: Supervisor.Settings = settings) -> VirtualLink {
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: settings.policy.firstDelay)
        #expect(link.state == .online)
        link.clearLog()
        return link
    }

    /// Tables indexed by timer (the simulation's) rely on each slot being
    /// the timer's place in `allCases`, one slot per timer.
    @Test func eachTimersSlotIsItsPlaceAmongAllTimers() {
        #expect(SupervisorTimer.allCases.map(\.slot) == Array(SupervisorTimer.allCases.indices))
        #expect(Set(SupervisorTimer.allCases).count == SupervisorTimer.allCases.count)
    }

    @Test func startsWaitingAndGoesOnlineThroughEveryStage() {
        var link = VirtualLink(settings: Self.settings)
        #expect(link.state == .waitingForBluez)
        link.observe(LinkObservation(bluezPresent: true))
        #expect(link.state == .waitingForAdapter)
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.connectTimes == [.zero])
        link.send(.connectFinished(attempt: 1, .success(())))
        #expect(link.state == .resolving)
        // ServicesResolved before the characteristics are exported: keep waiting.
        var partial = VirtualLink.up
        partial.characteristicsReady = false
        link.observe(partial)
        #expect(link.state == .resolving)
        link.answerSubscribes = false
        link.observe(VirtualLink.up)
        #expect(link.state == .subscribing)
        link.send(.subscribeFinished(attempt: 2, .success(())))
        #expect(link.state == .online)
        let transitions = link.log.compactMap { entry -> SupervisorState? in
            if case .transition(_, let to, let cause) = entry.action {
                #expect(!cause.isEmpty)
                return to
            }
            return nil
        }
        #expect(transitions == [.waitingForAdapter, .connecting, .resolving, .subscribing, .online])
    }

    @Test func keepAlivePollsEveryIntervalAtAFixedRate() {
        var link = onlineLink()
        link.advance(by: .seconds(60))
        let polls = link.log.filter { if case .poll = $0.action { return true } else { return false } }.map(\.time)
        #expect(polls == (1...12).map { Duration.seconds(5 * $0) })
        #expect(link.state == .online)
    }

    /// The dongle's idle clock runs from the connect; resolving services can
    /// take seconds on a real stack, so the first poll must not wait an interval.
    @Test func theFirstPollGoesOutAsSoonAsTheLinkIsOnline() {
        var link = VirtualLink(settings: Self.settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(2))
        #expect(link.state == .online)
        let online = link.log.first { if case .transition(_, .online, _) = $0.action { true } else { false } }?.time
        let firstPoll = link.log.first { if case .poll = $0.action { true } else { false } }?.time
        #expect(online != nil && firstPoll == online, "online at \(String(describing: online)), first poll at \(String(describing: firstPoll))")
    }

    @Test func aReconnectRequestIsAnsweredOnceWhenItsAttemptStarts() {
        var link = onlineLink()
        link.send(.reconnectRequested)
        #expect(link.answers.isEmpty, "no attempt yet: the link is still being dropped")
        link.observe(VirtualLink.down)
        #expect(link.answers == [.started(attempt: 1)])
        link.advance(by: .seconds(30))
        #expect(link.answers.count == 1)
    }

    @Test func aReconnectRequestDuringAnAttemptKeepsItsWindowFromThatAttempt() {
        // The attempt in flight becomes the first of a fresh window: the
        // window began with it, so no later attempt of it starts `window`
        // (180 s) or more after it (the DST's seed 83 saw one 3 min 5 s after).
        var link = VirtualLink(settings: Self.settings)
        link.connectResult = .success(())
        link.connectLatency = .seconds(60)  // every Connect outlives connect_timeout (20 s)
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        link.advance(by: .seconds(10))
        link.send(.reconnectRequested)
        link.advance(by: .seconds(400))
        let attempts = link.log.compactMap { entry -> (time: Duration, number: Int)? in
            if case .report(.reconnectAttempt(let number, _)) = entry.action { (entry.time, number) } else { nil }
        }
        let window = attempts.prefix { $0.number != 1 || $0.time == .zero }
        #expect(window.count > 2)
        #expect(window.allSatisfy { $0.time < .seconds(180) }, "\(window)")
    }

    @Test func aReconnectRequestWithNothingToConnectWithIsAnsweredAtOnce() {
        var link = VirtualLink(settings: Self.settings)
        link.send(.reconnectRequested)
        #expect(link.answers == [.notReady("bluetoothd is not running")])
        link.observe(LinkObservation(bluezPresent: true))
        link.send(.reconnectRequested)
        #expect(link.answers.last == .notReady("no Bluetooth adapter"))
        link.observe(LinkObservation(bluezPresent: true, adapterPresent: true))
        link.send(.reconnectRequested)
        #expect(link.answers.last == .notReady("the adapter is powered off"))
    }

    @Test func twoFailedPollsForceADisconnectAndAReconnect() {
        var link = onlineLink()
        link.pollResult = .failure(LinkFailure(.transient, "org.bluez.Error.Failed: Not connected"))
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
        #expect(link.count { $0 == .disconnect } == 0)
        link.advance(by: .seconds(5))
        #expect(link.count { $0 == .disconnect } == 1)
        #expect(link.state == .backingOff)
        // bluetoothd confirms the disconnect: a fresh window starts at once.
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.connectTimes == [.seconds(10)])
    }

    @Test func aPollThatNeverAnswersCountsAsFailedAtItsTimeout() {
        var link = onlineLink()
        link.pollResult = nil
        link.advance(by: .seconds(8))
        #expect(link.log.contains { $0.action == .report(.linkCheckFailed(consecutive: 1, error: "no reply within 3s")) })
        link.advance(by: .seconds(5))
        #expect(link.count { $0 == .disconnect } == 1)
    }

    @Test func unexpectedDropReconnectsAtOnce() {
        var link = onlineLink()
        link.advance(by: .seconds(2))
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.connectTimes == [.seconds(2)])
        #expect(link.log.contains { $0.action == .report(.disconnected(unexpected: true)) })
        // The keep-alive stopped with the link.
        #expect(link.timers[.keepalive] == nil)
    }

    /// The notification socket closing is the first sign of a drop: polls
    /// stop and the loss is reported at once, with no Disconnect sent; the
    /// attempt follows bluetoothd's Connected=false, and the loss is
    /// reported once.
    @Test func aClosedNotificationSocketIsALinkLossConfirmedByBluetoothd() {
        var link = onlineLink()
        link.advance(by: .seconds(12))
        link.connectResult = nil
        link.send(.notificationsEnded("bluetoothd closed the notification socket"))
        #expect(link.state == .backingOff)
        #expect(link.timers[.keepalive] == nil)
        #expect(link.count { $0 == .disconnect } == 0)
        #expect(link.connectTimes.isEmpty, "no attempt before bluetoothd reports the link down")
        link.advance(by: .milliseconds(5))
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        #expect(link.connectTimes == [.milliseconds(12_005)])
        #expect(link.count { $0 == .report(.disconnected(unexpected: true)) } == 1)
        #expect(link.count { $0 == .report(.disconnected(unexpected: false)) } == 0)
        // bluetoothd's view coming second changes nothing more.
        #expect(link.timers[.disconnectDeadline] == nil)
    }

    /// bluetoothd's view first, then the socket's end: one loss, one attempt.
    @Test func aSocketEndAfterBluetoothdsDropIsIgnored() {
        var link = onlineLink()
        link.advance(by: .seconds(12))
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        link.send(.notificationsEnded("bluetoothd closed the notification socket"))
        #expect(link.state == .connecting)
        #expect(link.connectTimes.count == 1)
        #expect(link.count { $0 == .report(.disconnected(unexpected: true)) } == 1)
    }

    /// A socket closed while bluetoothd keeps the link (another client's
    /// StopNotify): after the confirmation deadline the supervisor connects
    /// again, which succeeds at once, and subscribes (acquires) anew.
    @Test func aSocketClosedOnALiveLinkIsAcquiredAgainAfterTheDeadline() {
        var link = onlineLink()
        link.advance(by: .seconds(12))
        link.send(.notificationsEnded("bluetoothd closed the notification socket"))
        link.clearLog()
        link.advance(by: Self.settings.linkLossConfirmation)
        #expect(link.connectTimes == [.seconds(12) + Self.settings.linkLossConfirmation])
        #expect(link.state == .online)
        #expect(link.count { if case .subscribe = $0 { true } else { false } } == 1)
        #expect(link.supervisor.status.reconnects == 1)
    }

    /// While subscribing, a closed socket is a failed attempt of the window.
    @Test func aSocketEndWhileSubscribingIsAFailedAttempt() {
        var link = VirtualLink(settings: Self.settings)
        link.answerSubscribes = false
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .subscribing)
        link.connectResult = nil
        link.send(.notificationsEnded("bluetoothd closed the notification socket"))
        #expect(link.state == .backingOff || link.state == .connecting)
        #expect(link.supervisor.status.windowAttempt >= 1)
    }

    @Test func firstDelayIsHonoured() {
        var settings = Self.settings
        settings.policy.firstDelay = .milliseconds(500)
        var link = onlineLink(settings: settings)
        link.connectResult = nil
        let drop = link.now
        link.observe(VirtualLink.down)
        #expect(link.state == .backingOff)
        link.advance(by: .milliseconds(499))
        #expect(link.connectTimes.isEmpty)
        link.advance(by: .milliseconds(1))
        #expect(link.connectTimes == [drop + .milliseconds(500)])
    }

    @Test func failingConnectsFollowTheScheduleThenEscalateThenCoolDown() {
        var link = onlineLink()
        link.connectResult = .failure(LinkFailure(.transient, "org.bluez.Error.Failed: le-connection-abort-by-local"))
        link.controllerCheckAnswer = .unknown("not asked here")
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(400))
        let times = link.connectTimes
        // Bounded: never more than the window's attempts, all inside the window.
        #expect(times.count <= Self.policy.windowAttempts)
        #expect(times.count >= 8)
        #expect(times.allSatisfy { $0 < .seconds(180) })
        #expect(times.first == .zero)
        // Each gap is the backoff for that attempt, within the jitter.
        for (index, pair) in zip(times, times.dropFirst()).enumerated() {
            let base = Self.policy.baseDelay(beforeAttempt: index + 2)
            let gap = pair.1 - pair.0
            #expect(gap >= base * 0.8 && gap <= base * 1.2, "gap \(index): \(gap) vs \(base)")
        }
        // Then the escalation steps, in order.
        let steps = link.log.compactMap { entry -> EscalationStep? in
            if case .escalate(let step, _) = entry.action { return step } else { return nil }
        }
        #expect(steps == [.powerCycle])
        #expect(link.state == .escalating)
        link.finishEscalation(.powerCycle, .success(()))
        link.finishEscalation(.hciReset, .failure(LinkFailure(.fatal, "unavailable: no Bluetooth in this kernel")))
        #expect(link.state == .coolingDown)
        #expect(link.log.contains { $0.action.startsDiscovery })
        #expect(link.log.contains { $0.action == .report(.windowExhausted(attempts: times.count)) })
    }

    @Test func coolingDownMakesOneBlindAttemptPerCooldown() {
        var link = refusingLink(running: .seconds(180))
        #expect(link.state == .coolingDown)
        let windowAttempts = link.connectTimes.count
        let cooledAt = link.log.last { if case .transition(_, .coolingDown, _) = $0.action { return true } else { return false } }?.time
        let start = try! #require(cooledAt)
        link.advance(by: .seconds(1000))
        let blind = link.connectTimes.dropFirst(windowAttempts)
        #expect(Array(blind) == [start + .seconds(300), start + .seconds(600), start + .seconds(900)])
        #expect(link.state == .coolingDown)
    }

    @Test func advertisingDuringCooldownStartsAFreshWindowAtOnce() {
        var link = refusingLink(running: .seconds(200))
        #expect(link.state == .coolingDown)
        let before = link.connectTimes.count
        link.connectResult = .success(())
        link.send(.advertising)
        #expect(link.connectTimes.count == before + 1)
        #expect(link.connectTimes.last == link.now)
        #expect(link.log.contains { $0.action == .stopDiscovery })
        #expect(link.state == .online)
        #expect(link.supervisor.status.reconnects == 0)
    }

    @Test func aDongleThatAdvertisesAllAlongGetsOnlyBlindAttempts() {
        var link = refusingLink()
        // Advertising every 100 ms all along (seen whenever discovery runs):
        // the window runs its course, then no fresh window in the cooldown.
        for _ in 0..<2800 {
            link.advance(by: .milliseconds(100))
            link.send(.advertising)
        }
        #expect(link.state == .coolingDown)
        let before = link.connectTimes.count
        #expect(before <= Self.policy.windowAttempts)
        #expect(link.connectTimes.allSatisfy { $0 < .seconds(180) })
        // Silent for a while, then seen again: it woke up.
        link.advance(by: Self.settings.advertisingSilence)
        link.send(.advertising)
        #expect(link.connectTimes.count == before + 1)
    }

    @Test func inProgressIsCancelledThenRetried() {
        var link = onlineLink()
        link.connectResult = .failure(LinkFailure(.needsCancel, "org.bluez.Error.InProgress: Operation already in progress"))
        link.observe(VirtualLink.down)
        let first = link.log.firstIndex { if case .connect = $0.action { return true } else { return false } }
        let cancel = link.log.firstIndex { $0.action == .disconnect }
        #expect(first != nil && cancel != nil && first! < cancel!)
        link.connectResult = .success(())
        link.advance(by: .seconds(2))
        #expect(link.state == .online)
        #expect(link.supervisor.status.reconnects == 1)
    }

    @Test func aBlindAttemptRefusedForAStuckConnectIsTriedOnceMoreAfterTheCancel() {
        // make dst seed 144: the cooldown's blind attempt met InProgress (a
        // connect stuck in bluetoothd), so it never went out; cooling down
        // 5 minutes more left the dongle unreached for 9 minutes.
        func coolingDown() -> VirtualLink {
            var link = refusingLink(running: .seconds(180))
            #expect(link.state == .coolingDown)
            let cooledAt = link.log.last { if case .transition(_, .coolingDown, _) = $0.action { true } else { false } }?.time
            link.advance(by: (cooledAt ?? .zero) + Self.policy.cooldown - link.now - .milliseconds(1))
            link.clearLog()
            return link
        }
        var link = coolingDown()
        let inProgress = LinkFailure(.needsCancel, "org.bluez.Error.InProgress: In Progress")
        link.connectResult = .failure(inProgress)
        link.advance(by: .milliseconds(1))  // the blind attempt
        #expect(link.connectTimes.count == 1)
        #expect(link.count { $0 == .disconnect } == 1)
        #expect(link.state == .backingOff)
        link.connectResult = .success(())
        link.advance(by: .seconds(1))
        #expect(link.connectTimes.count == 2)
        #expect(link.state == .online)

        // Refused so again after the cancel: one retry only, then the cooldown.
        var stuck = coolingDown()
        stuck.connectResult = .failure(inProgress)
        stuck.advance(by: .seconds(2))
        #expect(stuck.connectTimes.count == 2)
        #expect(stuck.state == .coolingDown)
        // Other failures of a blind attempt cool down at once, as before.
        var refused = coolingDown()
        refused.advance(by: .seconds(2))
        #expect(refused.connectTimes.count == 1)
        #expect(refused.state == .coolingDown)
    }

    @Test func aConnectThatHangsIsCancelledAtTheConnectTimeout() {
        var link = onlineLink()
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        link.advance(by: .seconds(20))
        #expect(link.count { $0 == .disconnect } == 1)
        #expect(link.state == .backingOff)
        // The late reply of the abandoned attempt is ignored.
        link.send(.connectFinished(attempt: 99, .success(())))
        #expect(link.state == .backingOff)
    }

    @Test func adapterOffMeansNoAttemptsUntilPowerReturns() {
        var link = onlineLink()
        link.connectResult = .failure(Self.abort)
        var off = VirtualLink.down
        off.adapterPowered = false
        link.observe(off)
        #expect(link.state == .waitingForAdapter)
        link.advance(by: .seconds(600))
        #expect(link.connectTimes.isEmpty)
        #expect(link.timers.isEmpty)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.connectTimes == [.seconds(600)])
        #expect(link.state == .online)
    }

    @Test func bluetoothdVanishingAndReturningResubscribes() {
        var link = onlineLink()
        link.observe(LinkObservation())
        #expect(link.state == .waitingForBluez)
        #expect(link.log.contains { $0.action == .report(.bluezVanished) })
        link.advance(by: .seconds(30))
        #expect(link.connectTimes.isEmpty)
        link.observe(VirtualLink.down)
        #expect(link.log.contains { $0.action == .report(.bluezAppeared) })
        #expect(link.state == .online)
        #expect(link.count { if case .subscribe = $0 { return true } else { return false } } == 1)
    }

    @Test func aBluetoothdThatDoesNotAnswerIsWaitedForLikeOneThatLeft() {
        // Hung, it keeps its name: no connect, no poll, no escalation while
        // it does not answer; it is not said to have gone or come back.
        var link = onlineLink()
        var hung = VirtualLink.up
        hung.bluezAnswering = false
        link.observe(hung)
        #expect(link.state == .waitingForBluez)
        #expect(link.log.contains {
            if case .transition(.online, .waitingForBluez, let cause) = $0.action { cause == "bluetoothd does not answer" } else { false }
        })
        #expect(!link.log.contains { $0.action == .report(.bluezVanished) })
        #expect(link.log.contains { $0.action == .report(.disconnected(unexpected: true)) })
        link.clearLog()
        link.advance(by: .seconds(60))
        #expect(link.log.allSatisfy { if case .transition = $0.action { false } else { true } })
        #expect(link.connectTimes.isEmpty)
        #expect(!link.log.contains { if case .poll = $0.action { true } else { false } })
        link.observe(VirtualLink.up)  // answers again, the link still up
        #expect(!link.log.contains { $0.action == .report(.bluezAppeared) })
        #expect(link.log.contains {
            if case .transition(.waitingForBluez, _, let cause) = $0.action { cause.hasPrefix("bluetoothd answers again") } else { false }
        })
        #expect(link.state == .online)

        // Hung again, and this time killed (systemd's watchdog) and started
        // again: its end and its return are told.
        link.observe(hung)
        link.clearLog()
        link.observe(LinkObservation())
        #expect(link.log.contains { $0.action == .report(.bluezVanished) })
        #expect(link.state == .waitingForBluez)
        link.observe(VirtualLink.down)
        #expect(link.log.contains { $0.action == .report(.bluezAppeared) })
        #expect(link.state == .online)
    }

    @Test func aConnectLeftInAHungBluetoothdIsCancelledBeforeTheNextAttempt() {
        // bluetoothd hangs with this attempt's Connect unanswered: a
        // Disconnect goes after it (served in order when bluetoothd wakes),
        // and the next Connect only once it answers again.
        var link = VirtualLink(settings: Self.settings)
        link.connectResult = .success(())
        link.connectLatency = .seconds(20)
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        link.advance(by: .seconds(5))
        link.clearLog()
        var hung = VirtualLink.down
        hung.bluezAnswering = false
        link.observe(hung)
        #expect(link.state == .waitingForBluez)
        let disconnect = link.log.firstIndex { $0.action == .disconnect }
        #expect(disconnect != nil)
        #expect(link.connectTimes.isEmpty)
        link.observe(VirtualLink.down)
        #expect(link.state == .connecting)
        let connect = link.log.firstIndex { if case .connect = $0.action { true } else { false } }
        if let disconnect, let connect { #expect(disconnect < connect) } else { Issue.record("no disconnect, or no new connect") }

        // Gone from the bus rather than hung: nothing to cancel.
        link.clearLog()
        link.observe(LinkObservation())
        #expect(!link.log.contains { $0.action == .disconnect })
    }

    @Test func unknownDongleIsSearchedForWithDiscovery() {
        var link = VirtualLink(settings: Self.settings)
        link.connectResult = .success(())
        var unknown = VirtualLink.down
        unknown.devicePresent = false
        link.observe(unknown)
        #expect(link.state == .searching)
        #expect(link.log.contains { $0.action.startsDiscovery })
        #expect(link.connectTimes.isEmpty)
        link.observe(VirtualLink.down)
        #expect(link.log.contains { $0.action == .stopDiscovery })
        #expect(link.state == .online)
    }

    @Test func manualReconnectDropsAndReconnects() {
        var link = onlineLink()
        link.send(.reconnectRequested)
        #expect(link.count { $0 == .disconnect } == 1)
        link.observe(VirtualLink.down)
        #expect(link.connectTimes.count == 1)
        #expect(link.state == .online)
        #expect(link.supervisor.status.reconnects == 1)
    }

    @Test func manualReconnectDuringCooldownStartsAFreshWindow() {
        var link = refusingLink(running: .seconds(200))
        #expect(link.state == .coolingDown)
        link.clearLog()
        link.send(.reconnectRequested)
        #expect(link.connectTimes == [link.now])
        #expect(link.supervisor.status.windowAttempt == 1 || link.state == .backingOff)
    }

    @Test func fatalErrorsCoolDownInsteadOfHammering() {
        var link = onlineLink()
        link.connectResult = .failure(LinkFailure(.fatal, "org.bluez.Error.NotPermitted"))
        link.observe(VirtualLink.down)
        #expect(link.state == .coolingDown)
        #expect(link.connectTimes.count == 1)
        #expect(link.supervisor.status.lastError == "org.bluez.Error.NotPermitted")
    }

    @Test func keepAliveOffMeansNoPolls() {
        var settings = Self.settings
        settings.keepaliveEnabled = false
        var link = onlineLink(settings: settings)
        link.advance(by: .seconds(60))
        #expect(link.count { if case .poll = $0 { return true } else { return false } } == 0)
    }

    @Test func aFlappingLinkBacksOffAndInTheEndCoolsDown() {
        var settings = Self.settings
        settings.escalation = []
        var link = onlineLink(settings: settings)
        // The dongle accepts every connection and drops it a second later.
        var drops: [Duration] = []
        var onlineAt: Duration?
        for _ in 0..<6000 where link.state != .coolingDown {
            link.advance(by: .milliseconds(100))
            if link.state == .online {
                let since = onlineAt ?? link.now
                onlineAt = since
                if link.now - since >= .seconds(1) {
                    drops.append(link.now)
                    onlineAt = nil
                    link.observe(VirtualLink.down)
                }
            }
        }
        let connects = link.connectTimes
        #expect(link.state == .coolingDown)
        #expect(connects.count <= settings.policy.windowAttempts + 1)
        // The first reconnect is immediate, later ones back off.
        #expect(connects.first == drops.first)
        let delays = zip(drops, connects).map { $1 - $0 }
        #expect(delays.dropFirst(2).allSatisfy { $0 >= .milliseconds(800) }, "\(delays)")
    }

    @Test func aDropWhileResolvingIsAFailedAttemptOfTheSameWindow() {
        var link = onlineLink()
        link.connectResult = nil
        link.observe(VirtualLink.down)
        #expect(link.connectTimes == [link.now])
        var connectedOnly = VirtualLink.down
        connectedOnly.connected = true
        link.observe(connectedOnly)
        link.send(.connectFinished(attempt: lastConnectID(link), .success(())))
        #expect(link.state == .resolving)
        link.observe(VirtualLink.down)
        #expect(link.state == .backingOff, "the second attempt of the window backs off")
        #expect(link.supervisor.status.windowAttempt == 1)
    }

    @Test func aConnectReplyAfterTheLinkAlreadyDroppedIsALinkLoss() {
        var link = onlineLink()
        link.connectResult = nil
        link.observe(VirtualLink.down)
        var connectedOnly = VirtualLink.down
        connectedOnly.connected = true
        link.observe(connectedOnly)  // Connected=true …
        link.observe(VirtualLink.down)  // … and false again, both before the reply
        link.send(.connectFinished(attempt: lastConnectID(link), .success(())))
        #expect(link.state == .backingOff, "not a 20 s wait in resolving")
    }

    func adapterLeftOffByEscalation() -> VirtualLink {
        var link = refusingLink(escalation: [.powerCycle], running: .seconds(200))
        #expect(link.state == .escalating)
        var off = VirtualLink.down
        off.adapterPowered = false
        link.observe(off)
        link.finishEscalation(.powerCycle, .failure(LinkFailure(.transient, "org.bluez.Error.Failed")))
        #expect(link.state == .waitingForAdapter)
        return link
    }

    @Test func anEscalationThatLeavesTheAdapterOffKeepsPoweringItOn() {
        var link = adapterLeftOffByEscalation()
        link.advance(by: .seconds(35))
        let powerOns = link.log.filter { $0.action == .powerOn }.map(\.time)
        #expect(powerOns.count == 3, "at once, 10 s later, 20 s after that: \(powerOns)")
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
        link.advance(by: .seconds(60))
        #expect(link.log.filter { $0.action == .powerOn }.count == 3)
    }

    @Test func anAdapterThatStaysOffIsPoweredOnLessAndLessOften() {
        // A wedged controller that an escalation left off and that refuses
        // every power-on: a few tries an hour in the end, not one every 10 s.
        var link = adapterLeftOffByEscalation()
        link.advance(by: .seconds(3 * 3600))
        let powerOns = link.log.filter { $0.action == .powerOn }.map(\.time)
        let gaps = zip(powerOns.dropFirst(), powerOns).map { ($0 - $1).components.seconds }
        #expect(Array(gaps.prefix(8)) == [10, 20, 40, 80, 160, 320, 600, 600], "\(gaps)")
        #expect(gaps.allSatisfy { $0 <= 600 })
        #expect(powerOns.count <= 25, "\(powerOns.count) power-ons in 3 h")
        #expect(link.state == .waitingForAdapter)
    }

    @Test func aSuccessfulEscalationIsTriedOnceAtOnceThenCoolsDown() {
        var link = refusingLink(escalation: [.hciReset], running: .seconds(200))
        let before = link.connectTimes.count
        link.finishEscalation(.hciReset, .success(()))
        #expect(link.connectTimes.count == before + 1)
        #expect(link.connectTimes.last == link.now)
        #expect(link.state == .coolingDown)
    }

    @Test func aReconnectDuringEscalationWaitsForItToFinish() {
        var link = refusingLink(escalation: [.powerCycle, .hciReset], running: .seconds(200))
        #expect(link.state == .escalating)
        let before = link.connectTimes.count
        link.send(.reconnectRequested)
        #expect(link.connectTimes.count == before, "no attempt while the adapter may be off")
        link.connectResult = .success(())
        link.finishEscalation(.powerCycle, .success(()))
        #expect(link.connectTimes.count == before + 1)
        #expect(!link.log.contains { $0.action.escalatedStep == .hciReset }, "the person asked to reconnect now")
        #expect(link.state == .online)
    }

    /// The old type kept "a reconnect was asked for during an escalation" in
    /// a loose flag that outlived the escalation when its step left the
    /// adapter off; the next outage's escalation then skipped its remaining
    /// steps. Now the request lives in the escalating state and goes with it.
    @Test func aReconnectDuringAnEscalationDoesNotShortenTheNextOne() {
        var link = refusingLink(escalation: [.powerCycle, .hciReset], running: .seconds(200))
        #expect(link.state == .escalating)
        link.send(.reconnectRequested)
        var off = VirtualLink.down
        off.adapterPowered = false
        link.observe(off)
        link.finishEscalation(.powerCycle, .success(()))
        #expect(link.state == .waitingForAdapter)
        link.observe(VirtualLink.down)  // powered again; the dongle still refuses
        link.advance(by: .seconds(200))
        #expect(link.state == .escalating)
        link.clearLog()
        link.finishEscalation(.powerCycle, .success(()))
        #expect(link.log.contains { $0.action.escalatedStep == .hciReset }, "every step of the next escalation runs")
    }

    @Test func discoveryThatFailsToStartIsRetried() {
        var link = VirtualLink.searching(settings: Self.settings)
        link.failDiscovery(LinkFailure(.transient, "org.bluez.Error.NotReady"))
        link.advance(by: Self.settings.discoveryRetry)
        #expect(link.log.filter { $0.action.startsDiscovery }.count == 2)
    }

    private func lastConnectID(_ link: VirtualLink) -> Int {
        link.log.compactMap { if case .connect(let id, _) = $0.action { return id } else { return nil } }.last ?? -1
    }
}
