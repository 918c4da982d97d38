import LinkPolicy
import Testing

@testable import LinkSupervisor

/// An adapter held off by rfkill or a controller that failed its
/// initialisation: recovery steps in bounded, paced rounds; a hard block
/// waited out; a wedged controller's escalation going on to the USB steps.
@Suite struct AdapterRecoveryTests {
    static let settings = SupervisorTests.settings

    static var blockedSoft: LinkObservation {
        var observation = VirtualLink.down
        observation.adapterPowered = false
        observation.radioBlock = .soft
        return observation
    }

    static var blockedHard: LinkObservation {
        var observation = blockedSoft
        observation.radioBlock = .hard
        return observation
    }

    /// bluetoothd there, no adapter, and the kernel's controller failed its set-up.
    static var failedController: LinkObservation {
        var observation = LinkObservation(bluezPresent: true)
        observation.controllerFailed = true
        return observation
    }

    func link(escalation: [EscalationStep]) -> VirtualLink {
        var settings = Self.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: settings.policy.firstDelay)
        #expect(link.state == .online)
        link.clearLog()
        return link
    }

    func steps(_ link: VirtualLink) -> [EscalationStep] {
        link.log.compactMap { if case .escalate(let step, _) = $0.action { step } else { nil } }
    }

    func stepTimes(_ link: VirtualLink) -> [Duration] {
        link.log.compactMap { if case .escalate = $0.action { $0.time } else { nil } }
    }

    @Test func aSoftBlockIsClearedAtOnceWhenTheStepIsConfiguredAndTheLinkComesBack() {
        var link = link(escalation: [.powerCycle, .rfkillUnblock])
        link.observe(Self.blockedSoft)
        #expect(link.log.contains { $0.action == .report(.radioBlocked(.soft)) })
        #expect(steps(link) == [.rfkillUnblock])
        #expect(link.state == .escalating)
        // The kernel lifts the block; bluetoothd powers the adapter on again.
        link.observe(VirtualLink.down)
        #expect(link.log.contains { $0.action == .report(.radioUnblocked) })
        link.finishEscalation(.rfkillUnblock, .success(()))
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
    }

    @Test func aSoftBlockWithoutTheStepIsWaitedOutAndTheLinkResumesWhenSomeoneLiftsIt() {
        var link = link(escalation: [.powerCycle])
        link.observe(Self.blockedSoft)
        #expect(link.state == .waitingForAdapter)
        link.advance(by: .seconds(3600))
        #expect(steps(link).isEmpty)
        #expect(link.connectTimes.isEmpty)
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
    }

    @Test func aHardBlockIsWaitedOutWithNoStepsAndNoAttempts() {
        var link = link(escalation: [.rfkillUnblock, .usbReset, .usbRebind])
        link.observe(Self.blockedHard)
        #expect(link.log.contains { $0.action == .report(.radioBlocked(.hard)) })
        #expect(link.state == .waitingForAdapter)
        link.advance(by: .seconds(7200))
        #expect(steps(link).isEmpty)
        #expect(link.connectTimes.isEmpty)
        link.send(.reconnectRequested)
        #expect(link.answers == [.notReady("blocked by a hardware switch (rfkill hard block)")])
        #expect(steps(link).isEmpty)
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
    }

    @Test func aFailedControllerGetsTheUSBStepsInRoundsWhosePaceGrowsToTheCap() {
        var link = link(escalation: [.powerCycle, .hciReset, .usbReset, .usbRebind])
        link.observe(Self.failedController)
        // Only the steps that work without an adapter, in the configured order.
        #expect(steps(link) == [.usbReset])
        var rounds = 0
        for _ in 0..<40 {
            guard case .escalate(let step, _)? = link.log.last(where: { if case .escalate = $0.action { true } else { false } })?.action
            else { break }
            link.finishEscalation(step, .success(()))
            if step == .usbRebind { rounds += 1 }
            if link.now > .seconds(3 * 3600) { break }
            link.advance(by: .seconds(1))
            if link.state == .waitingForAdapter { link.advance(by: link.timers[.adapterRecovery].map { $0 - link.now } ?? .zero) }
        }
        let reports = link.log.compactMap { entry -> Duration? in
            if case .report(.adapterNotRecovered(_, _, let retryIn)) = entry.action { retryIn } else { nil }
        }
        #expect(reports.prefix(6) == [.seconds(30), .seconds(60), .seconds(120), .seconds(240), .seconds(480), .seconds(600)])
        #expect(reports.allSatisfy { $0 <= .seconds(600) })
        // Each round is usb-reset then usb-rebind; rounds start at least the reported pause apart.
        let times = stepTimes(link)
        #expect(steps(link).enumerated().allSatisfy { $0.element == ($0.offset % 2 == 0 ? .usbReset : .usbRebind) })
        let roundStarts = stride(from: 0, to: times.count, by: 2).map { times[$0] }
        for (index, pair) in zip(roundStarts, roundStarts.dropFirst()).enumerated() {
            #expect(pair.1 - pair.0 >= reports[index], "round \(index + 1)")
        }
        #expect(link.connectTimes.isEmpty)
    }

    @Test func aUSBStepThatBringsTheAdapterBackStartsAFreshWindow() {
        var link = link(escalation: [.usbReset, .usbRebind])
        link.observe(Self.failedController)
        #expect(steps(link) == [.usbReset])
        link.observe(VirtualLink.down)  // re-probed: bluetoothd lists it, powered
        link.finishEscalation(.usbReset, .success(()))
        #expect(steps(link) == [.usbReset])
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
    }

    @Test func aPersonsReconnectRunsTheNextRoundWithoutWaitingForItsPace() {
        var link = link(escalation: [.usbReset])
        link.observe(Self.failedController)
        link.finishEscalation(.usbReset, .failure(LinkFailure(.fatal, "USBDEVFS_RESET failed")))
        #expect(link.state == .waitingForAdapter)
        #expect(link.timers[.adapterRecovery] == link.now + .seconds(30))
        link.send(.reconnectRequested)
        #expect(steps(link) == [.usbReset, .usbReset])
        #expect(link.timers[.adapterRecovery] == nil)
        #expect(link.answers.count == 1)
    }

    @Test func aWedgedControllersEscalationGoesOnToTheUSBStepsWhenTheAdapterIsGone() {
        var settings = Self.settings
        settings.escalation = [.powerCycle, .hciReset, .usbReset]
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(SupervisorTests.abort)
        link.controllerCheckAnswer = .unknown("not asked here")
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(200))
        #expect(steps(link) == [.powerCycle])
        // The power cycle could not reach the controller and the hci-reset
        // took it down for good: bluetoothd no longer lists it.
        link.observe(LinkObservation(bluezPresent: true))
        link.finishEscalation(.powerCycle, .failure(LinkFailure(.fatal, "Timeout")))
        #expect(steps(link) == [.powerCycle, .hciReset])
        link.finishEscalation(.hciReset, .success(()))
        #expect(steps(link) == [.powerCycle, .hciReset, .usbReset])
        // The USB reset brings it back (under another index, same address).
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.finishEscalation(.usbReset, .success(()))
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
    }
}

/// A wedged controller found by asking it: the window ends between two
/// attempts and the steps run at once, without the power cycle.
@Suite struct ControllerCheckTests {
    func refusing(escalation: [EscalationStep]) -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(LinkFailure(.transient, "org.bluez.Error.Failed: Connection timed out"))
        link.observe(VirtualLink.down)
        return link
    }

    func checks(_ link: VirtualLink) -> Int { link.count { $0.checksController } }

    /// The controller asked while discovery runs does not answer: discovery
    /// stops and the steps run, `usb-reset` and never `power-cycle`.
    func answerUnresponsiveWhileDiscovering(_ link: inout VirtualLink, sourceLocation: SourceLocation = #_sourceLocation) {
        link.clearLog()
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        let actions = link.log.map(\.action)
        #expect(link.state == .escalating, sourceLocation: sourceLocation)
        #expect(actions.contains { $0.escalatedStep == .usbReset }, sourceLocation: sourceLocation)
        #expect(!actions.contains { $0.escalatedStep == .powerCycle }, sourceLocation: sourceLocation)
        #expect(actions.contains(.stopDiscovery), sourceLocation: sourceLocation)
    }

    @Test func theControllerIsAskedOncePerWindowAfterTheSecondFailure() {
        var link = refusing(escalation: [.hciReset])
        link.advance(by: .milliseconds(10))
        #expect(checks(link) == 0)  // one failure: not yet
        link.advance(by: .seconds(5))
        #expect(checks(link) == 1)
        link.answerControllerCheck(.responsive)
        link.advance(by: .seconds(60))
        #expect(checks(link) == 1)
        #expect(!link.log.contains { $0.action == .report(.controllerUnresponsive("")) })
    }

    @Test func anUnresponsiveControllerEndsTheWindowAndSkipsThePowerCycle() {
        var link = refusing(escalation: [.powerCycle, .hciReset, .usbReset])
        link.advance(by: .seconds(5))
        #expect(checks(link) == 1)
        #expect(link.state == .backingOff)
        let attempts = link.connectTimes.count
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.log.contains { $0.action == .report(.controllerUnresponsive("hci0 did not answer")) })
        #expect(link.state == .escalating)
        #expect(link.log.last { if case .escalate = $0.action { true } else { false } }?.action.escalatedStep == .hciReset)
        #expect(link.connectTimes.count == attempts)
        #expect(link.timers[.retry] == nil)
    }

    @Test func anUnknownAnswerChangesNothing() {
        var link = refusing(escalation: [.hciReset])
        link.advance(by: .seconds(5))
        link.answerControllerCheck(.unknown("this kernel has no Bluetooth"))
        #expect(link.state == .backingOff)
        link.advance(by: .seconds(400))
        // The window ran its course as before.
        #expect(link.log.contains { $0.action.escalatedStep == .hciReset })
    }
}

@Suite struct AdapterRecoveryPaceTests {
    @Test func aBlockPutBackAtOnceAfterTetherLiftedItMeetsOneUnblockPerPacedRound() {
        var settings = SupervisorTests.settings
        settings.escalation = [.rfkillUnblock]
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(1))
        #expect(link.state == .online)
        // Another program blocks the radio again right after each unblock.
        var unblocks: [Duration] = []
        for _ in 0..<200 {
            link.observe(AdapterRecoveryTests.blockedSoft)
            if let last = link.log.last(where: { $0.action.escalatedStep == .rfkillUnblock })?.time, unblocks.last != last {
                unblocks.append(last)
                link.observe(VirtualLink.down)
                link.finishEscalation(.rfkillUnblock, .success(()))
            }
            link.advance(by: .seconds(5))
            if link.now > .seconds(1800) { break }
        }
        // 30 s, 60 s, 120 s, … apart: 6 in half an hour, not hundreds.
        #expect(unblocks.count >= 4 && unblocks.count <= 7, "\(unblocks)")
        for (index, pair) in zip(unblocks, unblocks.dropFirst()).enumerated() {
            #expect(pair.1 - pair.0 >= .seconds(30) * (1 << index) - .seconds(5), "\(unblocks)")
        }
    }

    @Test func roundsCountNoMoreOnceTheAdapterStayedUsable() {
        var settings = SupervisorTests.settings
        settings.escalation = [.rfkillUnblock]
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(1))
        for _ in 0..<3 {
            link.observe(AdapterRecoveryTests.blockedSoft)
            #expect(link.state == .escalating)  // at once, every time
            link.observe(VirtualLink.down)
            link.finishEscalation(.rfkillUnblock, .success(()))
            link.advance(by: .seconds(60))
            #expect(link.state == .online)
        }
    }
}

extension ControllerCheckTests {
    @Test func anAnswerThatComesDuringTheNextAttemptEndsItToo() {
        var link = refusing(escalation: [.hciReset, .usbReset])
        link.advance(by: .seconds(5))
        #expect(checks(link) == 1)
        // The next attempt starts before the answer (a check takes up to 5 s).
        link.connectResult = nil
        link.advance(by: link.timers[.retry].map { $0 - link.now } ?? .zero)
        #expect(link.state == .connecting)
        link.clearLog()
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.log.contains { $0.action == .disconnect })
        #expect(link.log.contains { $0.action.escalatedStep == .hciReset })
        #expect(link.timers[.attemptDeadline] == nil)
        #expect(link.state == .escalating)
    }

    @Test func aControllerThatWedgedDuringACooldownIsFoundByTheBlindAttempt() {
        // The dongle slept through a window; the controller wedged meanwhile,
        // so the dongle's adverts would never arrive. The cooldown's blind
        // attempt fails and asks; the steps run, once per cooldown.
        var link = refusing(escalation: [.powerCycle, .usbReset])
        link.advance(by: .seconds(5))
        #expect(checks(link) == 1)
        link.answerControllerCheck(.responsive)
        link.advance(by: .seconds(200))
        #expect(link.state == .escalating)
        link.finishEscalation(.powerCycle, .success(()))
        link.finishEscalation(.usbReset, .success(()))
        #expect(link.state == .coolingDown)
        #expect(checks(link) == 1, "the escalation's own blind attempt does not ask")
        link.advance(by: SupervisorTests.settings.policy.cooldown + .seconds(1))
        #expect(link.state == .coolingDown)
        #expect(checks(link) == 2, "the cooldown's blind attempt failed: asked")
        answerUnresponsiveWhileDiscovering(&link)
        #expect(link.timers[.retry] == nil)
        link.finishEscalation(.usbReset, .success(()))
        #expect(link.state == .coolingDown)
        link.advance(by: .seconds(60))
        #expect(checks(link) == 0, "no loop: the next ask is the next cooldown's (the log was cleared at the answer)")
    }

    @Test func aBlindAttemptOnAControllerThatAnswersChangesNothing() {
        var link = refusing(escalation: [.usbReset])
        link.advance(by: .seconds(5))
        link.answerControllerCheck(.responsive)
        link.advance(by: .seconds(200))
        #expect(link.state == .escalating)
        link.finishEscalation(.usbReset, .success(()))
        link.advance(by: SupervisorTests.settings.policy.cooldown + .seconds(1))
        let asked = checks(link)
        #expect(asked == 2)
        link.answerControllerCheck(.responsive)
        #expect(link.state == .coolingDown)
        #expect(link.timers[.retry] != nil)
        link.advance(by: SupervisorTests.settings.policy.cooldown + .seconds(1))
        #expect(checks(link) == asked + 1, "one ask per cooldown")
    }

    @Test func aLinkThatCarriedDataAndFellSilentAsksTheControllerAtOnce() {
        var settings = SupervisorTests.settings
        settings.escalation = [.usbReset]
        settings.silenceLimit = .seconds(20)
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(1))
        link.send(.dataReceived)
        #expect(link.state == .online)
        link.clearLog()
        link.advance(by: .seconds(21))
        #expect(checks(link) == 1)
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.log.contains { $0.action.escalatedStep == .usbReset })
    }
}

/// A controller that wedges while the dongle is unknown to bluetoothd: only
/// discovery runs, and it hears nothing through it.
extension ControllerCheckTests {
    /// Searching from the start: bluetoothd does not know the dongle (and
    /// it refuses connections once found).
    func searching(escalation: [EscalationStep]) -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(LinkFailure(.transient, "org.bluez.Error.Failed: Connection timed out"))
        var unknown = VirtualLink.down
        unknown.devicePresent = false
        link.observe(unknown)
        return link
    }

    func checkTimes(_ link: VirtualLink) -> [Duration] {
        link.log.filter { $0.action.checksController }.map(\.time)
    }

    @Test func aControllerThatWedgedWhileSearchingIsAskedAndReset() {
        var link = searching(escalation: [.powerCycle, .usbReset])
        #expect(link.state == .searching)
        let first = SupervisorTests.settings.searchControllerCheck
        link.advance(by: first - .milliseconds(1))
        #expect(checks(link) == 0)
        link.advance(by: .milliseconds(1))
        #expect(checks(link) == 1)
        answerUnresponsiveWhileDiscovering(&link)
        #expect(link.timers[.searchCheck] == nil, "the search's timer goes with it")
        link.finishEscalation(.usbReset, .success(()))
        #expect(link.state == .searching, "the dongle is still unknown: searching again")
        #expect(link.log.contains { $0.action.startsDiscovery })
        // Still wedged: the next ask, and the next reset, wait twice as long.
        link.advance(by: first * 2 - .milliseconds(1))
        #expect(checks(link) == 0)
        link.advance(by: .milliseconds(1))
        #expect(checks(link) == 1)
    }

    @Test func aSearchThatFindsNothingAsksLessAndLessOften() {
        var link = searching(escalation: [.usbReset])
        var answered = 0
        for _ in 0..<200 {  // 3 h
            link.advance(by: .seconds(54))
            while answered < checks(link) {
                link.answerControllerCheck(.responsive)
                answered += 1
            }
        }
        #expect(link.state == .searching)
        let times = checkTimes(link)
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        #expect(gaps.count > 5)
        #expect(gaps == gaps.sorted(), "the pauses only grow")
        #expect(gaps.last == SupervisorTests.settings.adapterRecoveryDelayCap)
        #expect(times.count <= 25, "at most one ask every 10 min once paced")
        #expect(!link.log.contains { if case .escalate = $0.action { true } else { false } }, "it answers: no step")
    }

    @Test func findingTheDongleRestartsThePace() {
        var link = searching(escalation: [.usbReset])
        link.advance(by: .seconds(31))
        link.answerControllerCheck(.responsive)
        link.advance(by: .seconds(69))  // asked at 30 and 90
        #expect(checks(link) == 2)
        link.answerControllerCheck(.responsive)
        link.observe(VirtualLink.down)  // found; the attempt fails
        #expect(link.state == .backingOff)
        #expect(link.timers[.searchCheck] == nil, "the search's timer goes with it")
        var unknown = VirtualLink.down
        unknown.devicePresent = false
        link.observe(unknown)  // gone again (bluetoothd's temporary timeout)
        link.clearLog()
        link.advance(by: .seconds(30))  // the next attempt finds no device: searching
        let entered = link.log.last { if case .transition(_, .searching, _) = $0.action { true } else { false } }?.time
        #expect(entered != nil)
        link.advance(by: .seconds(60))
        #expect(checkTimes(link).first == entered.map { $0 + SupervisorTests.settings.searchControllerCheck })
    }

    @Test func discoveryThatKeepsFailingIsRetriedLessAndLessOften() {
        var link = searching(escalation: [])
        var starts: [Duration] = []
        for _ in 0..<12 {
            starts.append(link.now)
            link.failDiscovery(LinkFailure(.transient, "org.bluez.Error.Failed"))
            link.advance(by: link.timers[.discoveryRetry].map { $0 - link.now } ?? .zero)
        }
        let gaps = zip(starts.dropFirst(), starts).map { $0 - $1 }
        #expect(gaps.prefix(5) == [.seconds(5), .seconds(10), .seconds(20), .seconds(40), .seconds(60)])
        #expect(gaps.dropFirst(4).allSatisfy { $0 == SupervisorTests.settings.discoveryRetryCap })
        #expect(link.count(where: { $0.startsDiscovery }) == 13)
    }
}

/// A window exhausted while the controller check its failures (or a
/// silence) asked for is still out: the steps wait for the answer, which
/// decides whether the power cycle runs (`make e2e`'s uart-lockup once
/// power-cycled a wedged controller because the window ran out first).
extension ControllerCheckTests {
    /// Refused connects, the check asked and never answered, the window
    /// exhausted: escalating, no step yet.
    func exhaustedAwaitingTheCheck(
        escalation: [EscalationStep], sourceLocation: SourceLocation = #_sourceLocation
    ) -> VirtualLink {
        var link = refusing(escalation: escalation)
        link.advance(by: .seconds(400))
        #expect(checks(link) == 1, sourceLocation: sourceLocation)
        #expect(link.state == .escalating, sourceLocation: sourceLocation)
        #expect(link.log.contains { $0.action == .report(.windowExhausted(attempts: link.connectTimes.count)) },
                sourceLocation: sourceLocation)
        #expect(!link.log.contains { $0.action.escalatedStep != nil }, "no step before the answer",
                sourceLocation: sourceLocation)
        return link
    }

    @Test func stepsWaitingForAnUnresponsiveAnswerRunWithoutThePowerCycle() {
        var link = exhaustedAwaitingTheCheck(escalation: [.powerCycle, .hciReset, .uartReattach])
        link.advance(by: .seconds(60))
        #expect(link.state == .escalating, "the steps wait for the answer, however long")
        link.answerControllerCheck(.unresponsive("hci2 did not answer"))
        #expect(link.log.contains { $0.action == .report(.controllerUnresponsive("hci2 did not answer")) })
        link.finishEscalation(.hciReset, .failure(LinkFailure(.transient, "timed out")))
        let steps = link.log.compactMap(\.action.escalatedStep)
        #expect(steps == [.hciReset, .uartReattach])
    }

    @Test func stepsWaitingForAnAnswerThatTheControllerWorksRunAsConfigured() {
        var link = exhaustedAwaitingTheCheck(escalation: [.powerCycle, .hciReset])
        link.answerControllerCheck(.responsive)
        #expect(link.log.compactMap(\.action.escalatedStep) == [.powerCycle])
        link.finishEscalation(.powerCycle, .success(()))
        #expect(link.log.compactMap(\.action.escalatedStep) == [.powerCycle, .hciReset])
    }

    @Test func anUnresponsiveAnswerWithOnlyThePowerCycleConfiguredCoolsDown() {
        var link = exhaustedAwaitingTheCheck(escalation: [.powerCycle])
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.state == .coolingDown)
        #expect(!link.log.contains { $0.action.escalatedStep != nil })
    }

    @Test func anAnswerToAnotherCheckStartsNoStep() {
        var link = exhaustedAwaitingTheCheck(escalation: [.powerCycle, .hciReset])
        link.send(.controllerChecked(check: link.lastControllerCheck + 1000, .unresponsive("hci0 did not answer")))
        #expect(link.state == .escalating)
        #expect(!link.log.contains { $0.action.escalatedStep != nil })
    }

    @Test func stepsWithoutThePowerCycleDoNotWait() {
        var link = refusing(escalation: [.hciReset])
        link.advance(by: .seconds(400))
        #expect(checks(link) == 1)
        #expect(link.log.compactMap(\.action.escalatedStep) == [.hciReset])
    }

    @Test func aReconnectWhileTheStepsWaitAttemptsAtOnce() {
        var link = exhaustedAwaitingTheCheck(escalation: [.powerCycle, .hciReset])
        let before = link.connectTimes.count
        link.connectResult = nil
        link.send(.reconnectRequested)
        #expect(link.connectTimes.count == before + 1)
        #expect(link.state == .connecting)
        // The answer then ends that attempt as any attempt's (no power cycle).
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(link.log.compactMap(\.action.escalatedStep) == [.hciReset])
    }
}
