import LinkPolicy
@testable import LinkSupervisor
import Testing

/// Every call whose answer comes back carries an id, held by the state that
/// waits for it: an answer with any other id is stale and changes nothing.
@Suite struct StaleAnswerTests {
    static let abort = LinkFailure(.transient, "le-connection-abort-by-local")

    /// A dongle that refuses every connect, run until its window is exhausted.
    func exhaustedLink(escalation: [EscalationStep]) -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = escalation
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(Self.abort)
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(200))
        return link
    }

    @Test func theVerdictOfAnEarlierRunOfTheSameStepIsIgnored() {
        var link = exhaustedLink(escalation: [.hciReset])
        #expect(link.state == .escalating)
        let earlier = link.escalationRuns[.hciReset] ?? 0
        // bluetoothd restarts meanwhile; the next window runs the step again.
        link.observe(LinkObservation())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(200))
        #expect(link.state == .escalating)
        let current = link.escalationRuns[.hciReset] ?? 0
        #expect(current != earlier)
        link.send(.escalationFinished(.hciReset, run: earlier, .success(())))
        #expect(link.state == .escalating, "the earlier run's verdict says nothing about this one")
        link.finishEscalation(.hciReset, .success(()))
        #expect(link.state != .escalating)
    }

    @Test func aControllerCheckAnswerWithAnotherIdIsIgnored() {
        var link = exhaustedLink(escalation: [.hciReset])
        #expect(link.supervisor.pendingControllerCheck)
        link.clearLog()
        link.send(.controllerChecked(check: link.lastControllerCheck + 1000, .unresponsive("hci0 did not answer")))
        #expect(link.supervisor.pendingControllerCheck)
        #expect(link.log.isEmpty)
        link.answerControllerCheck(.unresponsive("hci0 did not answer"))
        #expect(!link.supervisor.pendingControllerCheck)
        #expect(link.log.contains { $0.action == .report(.controllerUnresponsive("hci0 did not answer")) })
    }

    @Test func theFailureOfAnEarlierStartDiscoveryIsIgnored() {
        var link = VirtualLink.searching(settings: SupervisorTests.settings)
        let failure = LinkFailure(.transient, "org.bluez.Error.NotReady")
        let first = link.lastDiscovery
        link.failDiscovery(failure)
        link.advance(by: SupervisorTests.settings.discoveryRetry)
        #expect(link.lastDiscovery != first)
        link.clearLog()
        // The first one's answer again, late: the discovery running now is another.
        link.send(.discoveryFailed(discovery: first, failure))
        #expect(link.log.isEmpty)
        link.failDiscovery(failure)
        #expect(link.log.contains { $0.action == .report(.discoveryFailed(error: failure.description)) })
    }

    /// A controller that refuses every StartDiscovery (bluetoothd answers a
    /// failed start with InProgress and `Discovering` false): each retry
    /// waits twice as long as the last, across the fresh discoveries that a
    /// reconnect request (or a cooldown's blind attempt) starts, so the
    /// journal gets a line a minute, not a burst of four after each.
    @Test func discoveryRetriesArePacedOverTheWholeOutage() {
        var link = VirtualLink.searching(settings: SupervisorTests.settings)
        let refused = LinkFailure(.transient, "StartDiscovery answered InProgress while the adapter is not discovering")
        var delays: [Duration] = []
        for _ in 0..<6 {
            link.failDiscovery(refused)
            guard let due = link.timers[.discoveryRetry] else { Issue.record("no retry after a refused start"); return }
            delays.append(due - link.now)
            // A fresh discovery at once, as a reconnect request makes.
            link.send(.reconnectRequested)
            #expect(link.state == .searching)
        }
        let settings = SupervisorTests.settings
        #expect(delays == [5, 10, 20, 40, 60, 60].map { min(Duration.seconds($0), settings.discoveryRetryCap) })
        // Online again: the next outage starts from the first delay.
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(1))
        #expect(link.state == .online)
        link.observe(VirtualLink.deviceUnknown)
        link.failDiscovery(refused)
        #expect(link.timers[.discoveryRetry].map { $0 - link.now } == settings.discoveryRetry)
    }

    /// A RemoveDevice asked for in one outage, answered only after the link
    /// was online again and lost again: the outage it belonged to is over,
    /// so its answer says nothing about the device object now.
    @Test func aRemovalAnsweredAfterItsOutageEndedChangesNothing() {
        var link = VirtualLink(settings: PairingTests.settings(pairs: true))
        link.connectResult = nil
        var bonded = VirtualLink.down
        bonded.deviceBonded = true
        link.observe(bonded)
        link.send(.bondRejected("reason 4"))
        let removal = link.lastRemoval
        #expect(removal != 0)
        link.send(.connectFinished(attempt: 1, .failure(PairingTests.refused)))
        // Its answer is lost; the bond goes all the same, and the link comes up.
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(5))
        #expect(link.state == .online)
        // A new outage: the link drops, and the next connect is in flight.
        link.connectResult = nil
        link.observe(bonded)
        #expect(link.state == .connecting)
        link.clearLog()
        link.send(.removeDeviceFinished(removal: removal, .success(())))
        #expect(link.log.isEmpty)
        #expect(link.state == .connecting)
        #expect(link.supervisor.deviceKnown, "the old answer does not make the object count as gone")
    }
}

/// bluetoothd answering a Connect with `UnknownObject` while it still lists
/// the object and reports its advertisements: each advertisement must not
/// open a fresh window (`make dst` found ten connects a second).
@Suite struct GoneObjectTests {
    static let gone = LinkFailure(.transient, "org.freedesktop.DBus.Error.UnknownObject", deviceGone: true)

    @Test func connectsOnAnObjectThatKeepsAnsweringUnknownObjectStayInOneBoundedWindow() {
        var settings = SupervisorTests.settings
        settings.escalation = []
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(Self.gone)
        link.observe(VirtualLink.down)
        #expect(link.state == .searching)
        // Advertisements on the object, ten a second, for two minutes.
        for _ in 0..<1200 {
            link.send(.advertising)
            link.advance(by: .milliseconds(100))
        }
        let connects = link.count { if case .connect = $0 { true } else { false } }
        #expect(connects > 1, "the window goes on once the object is back")
        #expect(connects <= settings.policy.windowAttempts, "\(connects) connects in two minutes")
        // No second in which more than one connect went out.
        let seconds = Dictionary(grouping: link.connectTimes) { $0.components.seconds }
        #expect(seconds.values.allSatisfy { $0.count <= 1 })
    }
}
