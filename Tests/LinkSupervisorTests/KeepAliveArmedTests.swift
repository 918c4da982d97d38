@testable import LinkSupervisor
import Testing

/// A link that is up has its keep-alive armed, however it got there: the
/// session is made with it (`Supervisor.KeepAlive`).
@Suite struct KeepAliveArmedTests {
    @Test func everyWayUpHasTheKeepAliveArmed() {
        var link = VirtualLink(settings: SupervisorTests.settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
        #expect(link.timers[.keepalive] != nil)
        // Subscribed again after the GATT database changed.
        link.send(.characteristicsChanged)
        #expect(link.state == .online)
        #expect(link.timers[.keepalive] != nil)

        var settings = SupervisorTests.settings
        settings.silenceLimit = .seconds(60)
        var quiet = VirtualLink(settings: settings)
        quiet.connectResult = .success(())
        quiet.observe(VirtualLink.down)
        #expect(quiet.state == .waitingForData)
        #expect(quiet.timers[.keepalive] != nil)
        quiet.send(.dataReceived)
        #expect(quiet.state == .online)
        #expect(quiet.timers[.keepalive] != nil)
        // Each fire arms the next.
        quiet.advance(by: .seconds(30))
        #expect(quiet.state == .online)
        #expect(quiet.timers[.keepalive] != nil)
    }

    @Test func withTheKeepAliveOffNothingIsPolledOrArmed() {
        var settings = SupervisorTests.settings
        settings.keepaliveEnabled = false
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(60))
        #expect(link.state == .online)
        #expect(link.timers[.keepalive] == nil)
        #expect(link.count { if case .poll = $0 { true } else { false } } == 0)
    }
}
