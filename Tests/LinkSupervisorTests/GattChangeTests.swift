@testable import LinkSupervisor
import Testing

/// A changed GATT database while the link is up (firmware update, Service
/// Changed): subscribe again on the new objects, bounded by the attempt
/// deadline, without dropping the link.
@Suite struct GattChangeTests {
    @Test func theLinkSubscribesAgainOnTheNewObjectsWithoutAReconnect() {
        var link = SilenceTests().notifyingLink()
        var gone = VirtualLink.up
        gone.characteristicsReady = false
        gone.gattProblem = "not found on the dongle: 6e400003-… (notify); it exposes no characteristic yet"
        link.observe(gone)
        #expect(link.state == .online)  // the event, not the observation, says they moved
        link.send(.characteristicsChanged)
        #expect(link.state == .resolving)
        link.observe(VirtualLink.up)
        #expect(link.state == .waitingForData)
        link.send(.dataReceived)
        #expect(link.state == .online)
        #expect(link.count { if case .disconnect = $0 { true } else { false } } == 0)
        #expect(link.count { if case .subscribe = $0 { true } else { false } } == 1)
        #expect(link.supervisor.status.reconnects == 0)
    }

    @Test func aDongleThatLostItsCharacteristicIsAFailedAttemptNamingWhatItLacks() {
        var link = SilenceTests().notifyingLink()
        var gone = VirtualLink.up
        gone.characteristicsReady = false
        gone.gattProblem = "not found on the dongle: 6e400003-b5a3-f393-e0a9-e50e24dcca9e (notify); it exposes 6e400002-b5a3-f393-e0a9-e50e24dcca9e"
        link.observe(gone)
        link.send(.characteristicsChanged)
        link.connectResult = nil
        link.advance(by: SupervisorTests.policy.connectTimeout)
        #expect(link.count { if case .disconnect = $0 { true } else { false } } == 1)
        let error = link.supervisor.status.lastError ?? ""
        #expect(error.contains("6e400003-b5a3-f393-e0a9-e50e24dcca9e (notify)"))
        #expect(error.contains("it exposes 6e400002"))
        #expect(link.state == .backingOff)
    }
}
