@testable import LinkSupervisor
import Testing

/// A retry window that fails with errors pointing at a stale device object:
/// remove it once per outage and discover the dongle again; never a bonded
/// one unless the config says so.
@Suite struct StaleDeviceTests {
    static let stale = LinkFailure(.transient, "org.bluez.Error.Failed: le-connection-abort-by-local", staleDevice: true)

    func exhaustedLink(
        bonded: Bool = false, pairs: Bool = false, removal: StaleDeviceRemoval = .unbonded, failure: LinkFailure = stale
    ) -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = []
        settings.pairs = pairs
        settings.staleDeviceRemoval = removal
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(failure)
        var down = VirtualLink.down
        down.deviceBonded = bonded
        link.observe(down)
        link.advance(by: .seconds(400))
        return link
    }

    func removals(_ link: VirtualLink) -> Int { link.count { if case .removeDevice = $0 { true } else { false } } }

    @Test func aWindowOfStaleErrorsRemovesTheDeviceAndDiscoversItAgain() {
        var link = exhaustedLink()
        #expect(removals(link) == 1)
        #expect(link.count { if case .report(.staleDeviceRemoved(let n, _)) = $0, n >= 5 { true } else { false } } == 1)
        #expect(link.state == .coolingDown)
        #expect(link.count { if case .startDiscovery = $0 { true } else { false } } >= 1)
        link.send(.removeDeviceFinished(.success(())))
        // bluetoothd drops the object; the blind attempt has nothing to
        // connect to, so it searches; discovery makes it anew: a fresh window.
        var gone = VirtualLink.down
        gone.devicePresent = false
        link.observe(gone)
        link.advance(by: SupervisorTests.policy.cooldown)
        #expect(link.state == .searching)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
    }

    @Test func connectsThatNeverEndCountAsStaleToo() {
        // bluetoothd 5.66 in `make e2e`: an object whose address type no longer
        // matches the dongle's; the kernel never even tries, and Connect hangs
        // until Tether's connect timeout cancels it.
        func exhausted(connectTimeout: Duration) -> VirtualLink {
            var settings = SupervisorTests.settings
            settings.escalation = []
            settings.policy.connectTimeout = connectTimeout
            var link = VirtualLink(settings: settings)
            link.connectResult = nil
            link.observe(VirtualLink.down)
            link.advance(by: .seconds(400))
            return link
        }
        // Longer than the kernel's 20 s LE timeout: the kernel never tried.
        let neverTried = exhausted(connectTimeout: .seconds(30))
        #expect(removals(neverTried) == 1)
        #expect(neverTried.count {
            if case .report(.staleDeviceRemoved(_, let error)) = $0, error.contains("no connection within 30s") { true } else { false }
        } == 1)
        // Exactly the kernel's timeout (the default): a Connect still pending
        // then is one the kernel never tried, or one it is about to end with
        // abort-by-local, the same sign.
        let atTheKernelsTimeout = exhausted(connectTimeout: .seconds(20))
        #expect(removals(atTheKernelsTimeout) == 1)
        // Within it, a timeout is only a dongle that does not accept (yet): no removal.
        #expect(removals(exhausted(connectTimeout: .seconds(10))) == 0)
    }

    @Test func oneRemovalPerOutageThenTheUsualCooldown() {
        var link = exhaustedLink()
        link.send(.removeDeviceFinished(.success(())))
        link.observe(VirtualLink.down)  // found again, and still refusing
        link.advance(by: .seconds(400))
        #expect(removals(link) == 1)
        #expect(link.state == .coolingDown)
    }

    @Test func aBondedDeviceTetherPairsItselfIsRemovedAndPairedAgain() {
        // Kept, the stale object refuses every connect for good (the soak's
        // stale-device fault on its paired dongle: never online again).
        var link = exhaustedLink(bonded: true, pairs: true)
        #expect(removals(link) == 1)
        #expect(link.count { if case .report(.staleDeviceRemoved) = $0 { true } else { false } } == 1)
        link.removedAndFoundAgain()
        #expect(link.count { if case .pair = $0 { true } else { false } } == 1)
        #expect(link.state == .online)
        #expect(removals(exhaustedLink(bonded: true, pairs: true, removal: .never)) == 0)
    }

    @Test func aBondedDeviceIsKeptUnlessTheConfigSaysAlways() {
        #expect(removals(exhaustedLink(bonded: true)) == 0)
        #expect(exhaustedLink(bonded: true).state == .coolingDown)
        #expect(removals(exhaustedLink(bonded: true, removal: .always)) == 1)
        #expect(removals(exhaustedLink(removal: .never)) == 0)
    }

    @Test func otherErrorsDoNotRemoveIt() {
        #expect(removals(exhaustedLink(failure: LinkFailure(.transient, "le-connection-timeout"))) == 0)
    }

    @Test func aFailedRemovalGoesOnToCooldown() {
        var link = exhaustedLink()
        link.send(.removeDeviceFinished(.failure(LinkFailure(.transient, "org.bluez.Error.Failed"))))
        #expect(link.count { if case .report(.staleDeviceRemovalFailed) = $0 { true } else { false } } == 1)
        #expect(link.state == .coolingDown)
        #expect(link.supervisor.status.nextAttemptAt != nil)
    }
}
