import LinkPolicy
import Pacing

/// Waiting on discovery: searching for an unknown dongle (the controller
/// checked at a doubling pace) and cooling down after an exhausted window;
/// discovery's own bookkeeping.
extension Supervisor {
    mutating func enterCooldown(cause: String, _ actions: inout Actions) {
        startTimer(.retry, after: policy.cooldown, &actions)
        let discovery = discoveryGoingOn(&actions)
        let cooldown = Cooldown(discovery: discovery, listeningSince: now, blindAttemptAt: now + policy.cooldown)
        enter(
            .coolingDown(cooldown),
            "\(cause); connecting when the dongle advertises, blind attempt in \(policy.cooldown.roundedText)", &actions)
    }

    mutating func enterSearching(cause: String, _ actions: inout Actions) {
        let discovery = discoveryGoingOn(&actions)
        if !armedTimers.contains(.searchCheck) { startTimer(.searchCheck, after: searchCheckDelay, &actions) }
        // Nobody heard yet in this search: quiet until someone is (then
        // the watch is armed for a stall).
        startTimer(.scanWatch, after: settings.discoveryRenewal, &actions)
        enter(
            .searching(discovery, scan: ScanWatch()),
            "\(cause); the dongle is unknown to bluetoothd, discovering", &actions)
    }

    /// The pause before the next controller check while searching, after
    /// `Outage.searchChecks` of them since the dongle was last found.
    var searchCheckDelay: Duration {
        pacedDelay(settings.searchControllerCheck, doubled: current.outage?.searchChecks ?? 0)
    }

    /// Searching found nothing for a while: ask the controller. Only a
    /// controller check tells a dongle that sleeps (nothing to do but listen)
    /// from a controller that hears nothing.
    mutating func searchCheckFired(_ actions: inout Actions) {
        if case .outage(_, .away(let away)) = current, case .listening(let window, _, let evidence) = away.phase {
            // The dongle did not show itself: the evidence kept decides.
            if let evidence { return confirmAway(evidence: evidence, &actions) }
            return listenedInVain(window, &actions)
        }
        guard current.waitsForAdvertisement else { return }
        if case .outage(let outage, .searching) = current, outage.deviceObjectGone {
            // bluetoothd never said the object went, yet it still lists it:
            // not the gone one any more (taken back before its removal was
            // seen), so it is tried.
            current.outage?.deviceObjectGone = false
            if observation.devicePresent {
                stopDiscoveryIfRunning(&actions)
                return attemptAfterSearch(cause: "the dongle is known to bluetoothd again", &actions)
            }
        }
        current.outage?.searchChecks += 1
        requestControllerCheck(&actions)
        startTimer(.searchCheck, after: searchCheckDelay, &actions)
    }

    // MARK: Discovery

    /// Discovery for a state that waits on it: the one running goes on,
    /// else a StartDiscovery now.
    mutating func discoveryGoingOn(_ actions: inout Actions) -> Discovery {
        if let running = current.discovery?.started { return Discovery(started: running) }
        return Discovery(started: startDiscovery(&actions))
    }

    /// Asks for a StartDiscovery; its id, which a failure echoes.
    mutating func startDiscovery(_ actions: inout Actions) -> Int {
        let discovery = nextOperation()
        actions.append(.startDiscovery(discovery))
        return discovery
    }

    mutating func discoveryFailed(_ id: Int, _ failure: LinkFailure, _ actions: inout Actions) {
        guard var discovery = current.discovery, discovery.started == id else { return }
        discovery.started = nil
        setDiscovery(discovery)
        current.outage?.discoveryFailures += 1
        let failures = current.outage?.discoveryFailures ?? 1
        actions.append(.report(.discoveryFailed(error: failure.description)))
        // Doubling: a refusal that lasts costs a journal line a minute, not
        // one every 5 s.
        startTimer(
            .discoveryRetry,
            after: pacedDelay(settings.discoveryRetry, doubled: failures - 1, cap: settings.discoveryRetryCap),
            &actions)
    }

    /// The StartDiscovery now in force (nil: none), for the discovery of the state.
    mutating func setDiscovery(started: Int?) {
        guard var discovery = current.discovery else { return }
        discovery.started = started
        setDiscovery(discovery)
    }

    mutating func setDiscovery(_ discovery: Discovery) {
        guard case .outage(_, let recovery) = current else { return }
        switch recovery {
        case .searching(_, let scan): update(.searching(discovery, scan: scan))
        case .coolingDown(var cooldown):
            cooldown.discovery = discovery
            update(.coolingDown(cooldown))
        case .away(var away):
            away.discovery = discovery
            update(.away(away))
        case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
             .backingOff, .awaitingDisconnect, .escalating:
            break
        }
    }

    /// After StartDiscovery failed, while searching or cooling down.
    mutating func startDiscoveryIfStopped(_ actions: inout Actions) {
        guard let discovery = current.discovery, !discovery.running else { return }
        setDiscovery(started: startDiscovery(&actions))
    }

    mutating func setScanWatch(_ scan: ScanWatch) {
        guard case .outage(_, let recovery) = current else { return }
        switch recovery {
        case .searching(let discovery, _): update(.searching(discovery, scan: scan))
        case .away(var away):
            away.scan = scan
            update(.away(away))
        case .waitingForBluez, .waitingForAdapter, .connecting, .resolving, .pairing, .subscribing, .waitingForData,
             .backingOff, .awaitingDisconnect, .escalating, .coolingDown:
            break
        }
    }

    mutating func stopDiscoveryIfRunning(_ actions: inout Actions) {
        guard current.discovering else { return }
        setDiscovery(started: nil)
        actions.append(.stopDiscovery)
    }
}
