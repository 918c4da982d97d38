import LinkPolicy
@testable import LinkSupervisor
import Testing

/// The dongle away (a parked vehicle): a window of connects that find nobody
/// beside a controller that works is no fault. No escalation, no removal, no
/// blind attempts; back at once when it advertises.
@Suite struct AwayTests {
    static let nobody = LinkFailure(.transient, "org.bluez.Error.Failed: le-connection-abort-by-local", staleDevice: true, noAnswer: true)

    /// Online at t=0, then the link drops and every connect finds nobody.
    func droppedLink(escalation: [EscalationStep] = [.powerCycle, .hciReset], bonded: Bool = false) -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        var down = VirtualLink.down
        down.deviceBonded = bonded
        link.connectResult = .success(())
        link.observe(down)
        #expect(link.state == .online)
        link.advance(by: .seconds(60))
        link.connectResult = .failure(Self.nobody)
        // Nobody answers: the kernel gives up after 20 s (or Tether's own
        // deadline comes first). A quick abort-by-local found someone.
        link.connectLatency = .seconds(20)
        link.clearLog()
        link.observe(down)
        return link
    }

    /// Runs the window out, answering each controller check with `check`;
    /// stops once the supervisor decided (or listens for evidence).
    func exhaustWindow(_ link: inout VirtualLink, answering check: ControllerCheck?) {
        for _ in 0..<400 {
            guard link.state == .backingOff || link.state == .connecting, !link.supervisor.listeningForEvidence else { return }
            link.advance(by: .seconds(1))
            if let check, link.log.last(where: { $0.action.checksController }) != nil,
               link.supervisor.pendingControllerCheck
            {
                link.answerControllerCheck(check)
            }
        }
    }

    /// Lets a listening supervisor decide, answering its controller checks with `check`.
    func finishListening(_ link: inout VirtualLink, answering check: ControllerCheck?) {
        for _ in 0..<60 where link.supervisor.listeningForEvidence {
            if let check, link.supervisor.pendingControllerCheck { link.answerControllerCheck(check) }
            link.advance(by: .seconds(1))
        }
    }

    func reports(_ link: VirtualLink) -> [SupervisorReport] {
        link.log.compactMap { if case .report(let report) = $0.action { report } else { nil } }
    }

    func escalations(_ link: VirtualLink) -> Int { link.count { if case .escalate = $0 { true } else { false } } }

    @Test func aWindowThatFindsNobodyBesideAnAnsweringControllerIsAway() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .away)
        #expect(escalations(link) == 0)
        // Its failures point at a stale object too (abort-by-local), and it
        // holds no bond: removed once, which costs nothing (discovery makes
        // it anew when the dongle advertises; a stale one never would).
        #expect(link.count { $0.removesDevice } == 1)
        #expect(!reports(link).contains { if case .windowExhausted = $0 { true } else { false } })
        let away = reports(link).filter { if case .dongleAway = $0 { true } else { false } }
        #expect(away == [.dongleAway(lastSeen: .seconds(60), evidence: "the controller answers")])
        #expect(link.log.contains { $0.action.startsDiscovery })
        #expect(link.supervisor.status.awaySince == .seconds(60))
        #expect(link.supervisor.status.nextAttemptAt == nil)
    }

    @Test func aBondedDongleAwayKeepsItsObject() {
        var link = droppedLink(bonded: true)
        exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .away)
        #expect(link.count { $0.removesDevice } == 0)
    }

    @Test func otherAdvertisersCountAsEvidenceToo() {
        var link = droppedLink()
        link.advance(by: .seconds(2))
        link.send(.othersAdvertising)
        exhaustWindow(&link, answering: .unknown("this kernel has no Bluetooth"))
        #expect(link.state == .away)
        #expect(reports(link).contains(.dongleAway(lastSeen: .seconds(60), evidence: "other devices are heard advertising")))
    }

    @Test func withoutEvidenceTheWindowIsAFaultAfterListening() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .unknown("this kernel has no Bluetooth"))
        #expect(link.supervisor.listeningForEvidence)
        finishListening(&link, answering: .unknown("this kernel has no Bluetooth"))
        #expect(link.state == .escalating)
        #expect(link.log.contains { $0.action.escalatedStep == .powerCycle })
        #expect(reports(link).contains { if case .windowExhausted = $0 { true } else { false } })
        #expect(!reports(link).contains { if case .dongleAway = $0 { true } else { false } })
        // It listened (discovering) for `awayListen` before it decided.
        let listened = link.log.first { $0.action.startsDiscovery }?.time
        let escalated = link.log.first { $0.action.escalatedStep == .powerCycle }?.time
        #expect(listened != nil && escalated == listened.map { $0 + SupervisorTests.settings.awayListen })
    }

    @Test func anAdvertiserHeardWhileListeningMakesItAway() {
        var link = droppedLink()
        exhaustWindow(&link, answering: nil)
        // Listening: shown as waiting, not yet as away.
        #expect(link.supervisor.status.awaySince == nil)
        #expect(link.log.last { $0.action.startsDiscovery } != nil)
        link.advance(by: .seconds(3))
        link.send(.othersAdvertising)
        #expect(link.state == .away)
        #expect(reports(link).contains(.dongleAway(lastSeen: .seconds(60), evidence: "other devices are heard advertising")))
        link.advance(by: .seconds(60))
        #expect(link.state == .away)
        #expect(escalations(link) == 0)
    }

    @Test func itsOwnAdvertisementWhileListeningMakesTheWindowAFault() {
        var link = droppedLink()
        exhaustWindow(&link, answering: nil)
        link.advance(by: .seconds(2))
        link.clearLog()
        link.send(.advertising)
        // It was there all along: its connects failing is no absence.
        #expect(link.state == .escalating)
        #expect(reports(link).contains { if case .windowExhausted = $0 { true } else { false } })
        #expect(!reports(link).contains { if case .dongleBack = $0 { true } else { false } })
        #expect(link.connectTimes.isEmpty)
    }

    @Test func evidenceFromBeforeTheWindowDoesNotCount() {
        var link = VirtualLink(settings: SupervisorTests.settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(30))
        link.send(.othersAdvertising)  // heard while online: it says nothing of the controller later
        link.advance(by: .seconds(30))
        link.connectResult = .failure(Self.nobody)
        link.connectLatency = .seconds(20)
        link.observe(VirtualLink.down)
        exhaustWindow(&link, answering: nil)
        finishListening(&link, answering: nil)
        #expect(link.state == .escalating)
    }

    @Test func failuresOfAnotherKindAreAFault() {
        var link = droppedLink()
        link.connectResult = .failure(LinkFailure(.transient, "org.bluez.Error.Failed: Input/output error"))
        exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .escalating)
    }

    @Test func aNightAwayTakesNoStepNoConnectAndFewChecks() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .away)
        link.clearLog()
        for _ in 0..<(10 * 60) {  // ten hours, a minute at a time
            link.advance(by: .seconds(60))
            if link.supervisor.pendingControllerCheck { link.answerControllerCheck(.responsive) }
        }
        #expect(link.state == .away)
        #expect(link.connectTimes.isEmpty)
        #expect(escalations(link) == 0)
        // Paced like the search's checks: doubling to the 10-minute cap.
        let checks = link.count { $0.checksController }
        #expect(checks >= 55 && checks <= 70, "controller checks in ten hours: \(checks)")
        #expect(reports(link).isEmpty, "\(reports(link))")
        #expect(link.supervisor.status.awaySince == .seconds(60))
    }

    @Test func backAtOnceWhenItAdvertisesAfterANight() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        link.advance(by: .seconds(8 * 3600))
        link.clearLog()
        link.connectResult = .success(())
        link.connectLatency = .zero
        link.send(.advertising)
        #expect(link.state == .online)
        #expect(link.connectTimes == [link.now])
        let back = reports(link).first { if case .dongleBack = $0 { true } else { false } }
        #expect(back != nil)
        #expect(link.log.contains { $0.action == .stopDiscovery })
        #expect(link.supervisor.status.awaySince == nil)
    }

    @Test func itsObjectMadeAnewByDiscoveryBringsItBackToo() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        var gone = VirtualLink.down
        gone.devicePresent = false
        link.observe(gone)  // bluetoothd dropped the temporary object
        #expect(link.state == .away)
        link.advance(by: .seconds(3600))
        link.clearLog()
        link.connectResult = .success(())
        link.connectLatency = .zero
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
        #expect(link.connectTimes.count == 1)
    }

    @Test func connectsThatFailWhileItAdvertisesAreAFault() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        link.clearLog()
        link.send(.advertising)
        exhaustWindow(&link, answering: .responsive)
        // Opened by its advertisement: it is there, so this is no absence.
        #expect(link.state != .away)
        #expect(reports(link).contains { if case .windowExhausted = $0 { true } else { false } })
    }

    @Test func anUnansweredCheckWhileAwayEscalatesWithoutThePowerCycle() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        link.clearLog()
        while !link.supervisor.pendingControllerCheck { link.advance(by: .seconds(10)) }
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.state == .escalating)
        #expect(link.log.contains { $0.action.escalatedStep == .hciReset })
        #expect(!link.log.contains { $0.action.escalatedStep == .powerCycle })
        #expect(link.log.contains { $0.action == .stopDiscovery })
    }

    /// Others' advertisements came through the controller just now: one
    /// check it answered late is no lockup; once nobody is heard either,
    /// the next unanswered check escalates.
    @Test func anUnansweredCheckBesideFreshAdvertisementsIsSlownessNotALockup() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        while !link.supervisor.pendingControllerCheck {
            link.advance(by: .seconds(5))
            link.send(.othersAdvertising)
        }
        link.clearLog()
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.state == .away)
        #expect(link.log.contains { if case .report(.controllerSlow("hci0 did not answer", _)) = $0.action { true } else { false } })
        #expect(!link.log.contains { if case .escalate = $0.action { true } else { false } })
        // Then silence: the controller passes nothing up, and the next check goes unanswered.
        while !link.supervisor.pendingControllerCheck { link.advance(by: .seconds(10)) }
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.state == .escalating)
        #expect(link.log.contains { $0.action == .report(.controllerUnresponsive("hci0 did not answer")) })
    }

    @Test func aReconnectRequestWhileAwayTriesAtOnce() {
        var link = droppedLink()
        exhaustWindow(&link, answering: .responsive)
        link.clearLog()
        link.send(.reconnectRequested)
        #expect(link.connectTimes == [link.now])
        #expect(link.answers == [.started(attempt: 1)])
    }
}

/// While away: a scan that heard others and then nobody has stalled.
@Suite struct ScanStallTests {
    func awayAmongOthers() -> VirtualLink {
        var link = AwayTests().droppedLink()
        link.advance(by: .seconds(1))
        link.send(.othersAdvertising)
        AwayTests().exhaustWindow(&link, answering: .unknown("no Bluetooth here"))
        #expect(link.state == .away)
        return link
    }

    func reports(_ link: VirtualLink) -> [SupervisorReport] { AwayTests().reports(link) }

    @Test func aScanThatHearsOthersStaysAlone() {
        var link = awayAmongOthers()
        link.clearLog()
        for _ in 0..<60 {  // an hour, others heard every 10 s
            for _ in 0..<6 {
                link.advance(by: .seconds(10))
                link.send(.othersAdvertising)
            }
        }
        #expect(!reports(link).contains { if case .scanStalled = $0 { true } else { false } })
        #expect(link.count { $0.startsDiscovery } == 0)
        // The watch is re-armed lazily: about one wake-up per two minutes.
        #expect(link.count { $0 == .startTimer(.scanWatch, after: .seconds(120)) } <= 31)
    }

    @Test func nobodyHeardForTwoMinutesRestartsDiscoveryThenTakesTheSteps() {
        var link = awayAmongOthers()
        link.controllerCheckAnswer = .responsive
        link.clearLog()
        link.advance(by: .seconds(130))
        #expect(reports(link).contains { if case .scanStalled(_, restarting: true) = $0 { true } else { false } })
        #expect(link.log.contains { $0.action == .stopDiscovery } && link.log.contains { $0.action.startsDiscovery })
        #expect(link.state == .away)
        link.clearLog()
        link.advance(by: .seconds(125))
        #expect(reports(link).contains { if case .scanStalled(_, restarting: false) = $0 { true } else { false } })
        #expect(link.state == .escalating)
        #expect(link.log.contains { $0.action.escalatedStep == .powerCycle })
    }

    /// Away on the controller's word alone (nobody heard during the
    /// window: its connects ran without discovery), then discovery hears
    /// others: a place found busy after the verdict is watched for a stall.
    @Test func othersFirstHeardAfterTheVerdictArmTheStallWatch() {
        var link = AwayTests().droppedLink()
        AwayTests().exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .away)
        link.advance(by: .seconds(5))
        link.send(.othersAdvertising)
        link.clearLog()
        link.advance(by: .seconds(130))
        #expect(reports(link).contains { if case .scanStalled(_, restarting: true) = $0 { true } else { false } })
    }

    @Test func othersHeardAgainAfterTheRestartEndTheStall() {
        var link = awayAmongOthers()
        link.advance(by: .seconds(130))
        link.send(.othersAdvertising)  // the fresh session hears them
        link.clearLog()
        link.advance(by: .seconds(60))
        link.send(.othersAdvertising)
        link.advance(by: .seconds(60))
        #expect(link.state == .away)
        #expect(!reports(link).contains { if case .scanStalled = $0 { true } else { false } })
    }

    @Test func aQuietPlaceRenewsTheSessionAndNeverCallsItAStall() {
        var link = AwayTests().droppedLink()
        AwayTests().exhaustWindow(&link, answering: .responsive)
        #expect(link.state == .away)
        link.clearLog()
        for _ in 0..<(12 * 60) {  // twelve hours
            link.advance(by: .seconds(60))
            if link.supervisor.pendingControllerCheck { link.answerControllerCheck(.responsive) }
        }
        #expect(link.state == .away)
        #expect(!reports(link).contains { if case .scanStalled = $0 { true } else { false } })
        let renewals = link.count { $0.startsDiscovery }
        #expect(renewals >= 70 && renewals <= 73, "renewals in twelve hours: \(renewals)")
        #expect(link.count { if case .escalate = $0 { true } else { false } } == 0)
    }
}

/// Searching (a gateway started while the vehicle is parked: the dongle
/// never seen, unknown to bluetoothd), discovery runs for hours: its scan
/// is watched as away's is.
extension ScanStallTests {
    func searchingAmongOthers() -> VirtualLink {
        var link = ControllerCheckTests().searching(escalation: [.powerCycle])
        #expect(link.state == .searching)
        link.advance(by: .seconds(1))
        link.send(.othersAdvertising)
        return link
    }

    func answerChecks(_ link: inout VirtualLink) {
        if link.supervisor.pendingControllerCheck { link.answerControllerCheck(.responsive) }
    }

    @Test func aSearchThatHearsOthersAndThenNobodyRestartsDiscoveryThenTakesTheSteps() {
        var link = searchingAmongOthers()
        link.clearLog()
        for _ in 0..<13 {
            link.advance(by: .seconds(10))
            answerChecks(&link)
        }
        #expect(reports(link).contains { if case .scanStalled(_, restarting: true) = $0 { true } else { false } })
        #expect(link.log.contains { $0.action == .stopDiscovery } && link.log.contains { $0.action.startsDiscovery })
        #expect(link.state == .searching)
        link.clearLog()
        for _ in 0..<13 {
            link.advance(by: .seconds(10))
            answerChecks(&link)
        }
        #expect(reports(link).contains { if case .scanStalled(_, restarting: false) = $0 { true } else { false } })
        #expect(link.log.contains { $0.action.escalatedStep == .powerCycle })
    }

    @Test func aSearchAmongOthersHeardAllAlongIsNoStall() {
        var link = searchingAmongOthers()
        link.clearLog()
        for _ in 0..<360 {  // an hour, others heard every 10 s
            link.advance(by: .seconds(10))
            link.send(.othersAdvertising)
            answerChecks(&link)
        }
        #expect(link.state == .searching)
        #expect(!reports(link).contains { if case .scanStalled = $0 { true } else { false } })
        #expect(link.count { if case .escalate = $0 { true } else { false } } == 0)
    }

    @Test func aQuietSearchRenewsTheSessionAndNeverCallsItAStall() {
        var link = ControllerCheckTests().searching(escalation: [.powerCycle])
        link.clearLog()
        for _ in 0..<(12 * 60) {  // twelve hours, nobody heard
            link.advance(by: .seconds(60))
            answerChecks(&link)
        }
        #expect(link.state == .searching)
        #expect(!reports(link).contains { if case .scanStalled = $0 { true } else { false } })
        let renewals = link.count { $0.startsDiscovery }
        #expect(renewals >= 70 && renewals <= 73, "renewals in twelve hours: \(renewals)")
        #expect(link.count { if case .escalate = $0 { true } else { false } } == 0)
    }
}

extension AwayTests {
    /// Parked right after it came back: the short session before the drop
    /// is a flap the window starts with, not a sign against the absence.
    @Test func aDongleThatLeavesRightAfterComingBackIsAwayToo() {
        var link = SupervisorTests().onlineLink()
        link.advance(by: .seconds(60))
        // Two links in a row that drop within seconds of coming up.
        for _ in 0..<2 {
            link.observe(VirtualLink.down)
            link.advance(by: .seconds(5))
            #expect(link.state == .online)
            link.advance(by: .seconds(2))
        }
        link.connectResult = .failure(Self.nobody)
        link.connectLatency = .seconds(20)
        link.clearLog()
        link.observe(VirtualLink.down)
        let first = link.supervisor.status.windowAttempt
        exhaustWindow(&link, answering: .responsive)
        #expect(first > 0, "the window starts with the flaps")
        #expect(link.state == .away, "\(reports(link))")
        #expect(escalations(link) == 0)
    }
}

extension AwayTests {
    /// Others heard within milliseconds of the listening's start, and the
    /// dongle a second later: it was there all along, so the connects that
    /// found nobody were a fault (a stale object, RF trouble), handled as
    /// one, not as an absence followed at once by a second window (the soak
    /// once saw twelve connects in ten seconds that way).
    @Test func theDongleHeardSoonAfterOthersMakesTheWindowAFault() {
        var link = droppedLink()
        exhaustWindow(&link, answering: nil)
        #expect(link.supervisor.listeningForEvidence)
        link.send(.othersAdvertising)
        #expect(link.supervisor.listeningForEvidence, "no verdict before the dongle had its chance to show itself")
        link.advance(by: .seconds(1))
        link.send(.advertising)
        #expect(!reports(link).contains { if case .dongleAway = $0 { true } else { false } })
        #expect(reports(link).contains { if case .windowExhausted = $0 { true } else { false } })
    }

    /// Others heard at once and the dongle not within the verdict's time: away.
    @Test func othersHeardAtOnceMakeItAwayAfterTheVerdictsTime() {
        var link = droppedLink()
        exhaustWindow(&link, answering: nil)
        let started = link.now
        link.send(.othersAdvertising)
        link.advance(by: SupervisorTests.settings.awayVerdictAfter)
        #expect(link.state == .away)
        let listening = link.log.first { if case .transition(_, _, let cause) = $0.action { cause.contains("listening") } else { false } }
        let away = link.log.first { if case .report(.dongleAway) = $0.action { true } else { false } }
        // Not at the evidence: when the dongle has had its time to show itself.
        #expect(away != nil && away?.time != started)
        #expect(away?.time == listening.map { $0.time + SupervisorTests.settings.awayVerdictAfter })
    }
}
