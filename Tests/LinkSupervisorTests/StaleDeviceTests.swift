import LinkPolicy
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
        link.answerRemoval(.success(()))
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
        link.answerRemoval(.success(()))
        var gone = VirtualLink.down
        gone.devicePresent = false
        link.observe(gone)
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

    /// `make e2e`'s stale-device run: the window failed, Tether removed the
    /// object and reset the controller, and the reset's answer came before
    /// bluetoothd's InterfacesRemoved (sent from an idle callback after the
    /// RemoveDevice reply). The escalation's attempt went to the removed
    /// object, met UnknownObject, and cooled down for the cooldown (15 s
    /// there) instead of discovering at once.
    func removingAndResetting() -> VirtualLink {
        var settings = SupervisorTests.settings
        settings.escalation = [.hciReset]
        var link = VirtualLink(settings: settings)
        link.connectResult = .failure(Self.stale)
        link.observe(VirtualLink.down)
        link.advance(by: .seconds(200))
        #expect(removals(link) == 1)
        #expect(link.state == .escalating)
        link.clearLog()
        return link
    }

    static let gone = LinkFailure(
        .transient, "org.freedesktop.DBus.Error.UnknownObject: Method \"Connect\" doesn't exist", staleDevice: true, deviceGone: true
    )

    @Test func theRemovalAnsweredBeforeItsSignalMeansSearchingNotAConnect() {
        var link = removingAndResetting()
        link.connectResult = .failure(Self.gone)
        link.answerRemoval(.success(()))
        link.finishEscalation(.hciReset, .success(()))
        // Still listed, but removed: no Connect on it, discovery instead.
        #expect(link.count { if case .connect = $0 { true } else { false } } == 0)
        #expect(link.state == .searching)
        var gone = VirtualLink.down
        gone.devicePresent = false
        link.observe(gone)
        #expect(link.state == .searching)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)  // discovery made it anew
        #expect(link.state == .online)
    }

    /// The reset's answer first: the blind attempt goes to the object
    /// bluetoothd is removing, and is told it is gone.
    func searchingAfterUnknownObject(sourceLocation: SourceLocation = #_sourceLocation) -> VirtualLink {
        var link = removingAndResetting()
        link.connectResult = .failure(Self.gone)
        link.finishEscalation(.hciReset, .success(()))
        #expect(link.count { if case .connect = $0 { true } else { false } } == 1, sourceLocation: sourceLocation)
        #expect(link.state == .searching, sourceLocation: sourceLocation)
        link.connectResult = .success(())
        return link
    }

    @Test func unknownObjectFromConnectMeansSearchingNotACooldown() {
        var link = searchingAfterUnknownObject()
        #expect(link.supervisor.status.nextAttemptAt == nil)
        // Another observation that still lists it (the removal's reply, any
        // change) is no reason to try the gone object again.
        link.answerRemoval(.success(()))
        var changed = VirtualLink.down
        changed.disconnectReasonsHeard = true
        link.observe(changed)
        #expect(link.count { if case .connect = $0 { true } else { false } } == 1)
        link.removedAndFoundAgain()
        #expect(link.state == .online)
    }

    @Test func aDeviceObjectNeverSignalledGoneIsTriedAtTheNextSearchCheck() {
        // bluetoothd made the object anew before its removal reached Tether
        // (both signals lost in one go, or a removal that was not ours):
        // the search's controller check is the latest the listing is trusted again.
        var link = searchingAfterUnknownObject()
        link.advance(by: SupervisorTests.settings.searchControllerCheck)
        #expect(link.state == .online)
    }

    @Test func anAdvertisementOnTheObjectMeansItIsBack() {
        var link = searchingAfterUnknownObject()
        link.send(.advertising)
        #expect(link.state == .online)
    }

    @Test func aFailedRemovalGoesOnToCooldown() {
        var link = exhaustedLink()
        link.answerRemoval(.failure(LinkFailure(.transient, "org.bluez.Error.Failed")))
        #expect(link.count { if case .report(.staleDeviceRemovalFailed) = $0 { true } else { false } } == 1)
        #expect(link.state == .coolingDown)
        #expect(link.supervisor.status.nextAttemptAt != nil)
    }
}
