import LinkPolicy
import Pacing

/// The dongle away (a parked vehicle): a window whose connects found nobody,
/// beside evidence that the controller works, is no fault. Discovering until
/// it advertises, the scan watched for a stall.
extension Supervisor {
    /// Whether `window` looks like an absent dongle: every attempt it made
    /// found nobody (`LinkFailure.noAnswer`; the short sessions it started
    /// with do not count: a link that came up and dropped before the dongle
    /// left is no sign against its absence), and it was neither opened by the
    /// dongle's own advertisement (then it is there, and connects fail) nor
    /// a blind one, with no bond trouble. A wedged controller or a stale
    /// object gives such windows too: only evidence about the controller
    /// (`controllerEvidence`) makes it away.
    func foundNobody(_ window: Window) -> Bool {
        !window.blind && !window.fromAdvertisement && window.attempts > window.flapped
            && window.unanswered == window.attempts - window.flapped && (current.outage?.bondLoss ?? BondLoss.none) == BondLoss.none
    }

    /// What shows that the controller works, seen since `start`: it
    /// answered a controller check, or another device was heard advertising.
    func controllerEvidence(since start: Duration) -> String? {
        if let at = history.controllerAnsweredAt, at >= start { return "the controller answers" }
        if let at = history.othersHeardAt, at >= start { return "other devices are heard advertising" }
        return nil
    }

    /// Connects found nobody and nothing shows yet whether the controller
    /// works: discovery (which hears other advertisers, and the dongle if it
    /// is back) and a controller check, for `awayListen`.
    mutating func listenForEvidence(after window: Window, _ actions: inout Actions) {
        let discovery = discoveryGoingOn(&actions)
        requestControllerCheck(&actions)
        cancelTimer(.searchCheck, &actions)
        startTimer(.searchCheck, after: settings.awayListen, &actions)
        enter(
            .away(Away(phase: .listening(window, since: now, evidence: nil), discovery: discovery, since: history.lastSeen ?? now)),
            "\(window.attempts) attempts found nobody; listening \(settings.awayListen.roundedText) for whether the controller hears anyone",
            &actions)
    }

    /// Evidence that the controller works, while listening for it: away,
    /// once the dongle has had `awayVerdictAfter` to show itself.
    mutating func evidenceArrived(_ evidence: String, _ actions: inout Actions) {
        guard case .outage(_, .away(var away)) = current, case .listening(let window, let since, let kept) = away.phase else {
            return
        }
        let verdictAt = since + settings.awayVerdictAfter
        guard now < verdictAt else { return confirmAway(evidence: evidence, &actions) }
        guard kept == nil else { return }
        away.phase = .listening(window, since: since, evidence: evidence)
        update(.away(away))
        // The search check that ends the listening comes sooner, then.
        cancelTimer(.searchCheck, &actions)
        startTimer(.searchCheck, after: verdictAt - now, &actions)
    }

    /// Listening heard nobody and the controller did not say it works, or
    /// heard the dongle itself (it was there): the window is a fault after all.
    mutating func listenedInVain(_ window: Window, _ actions: inout Actions) {
        stopDiscoveryIfRunning(&actions)
        windowFailed(window, &actions)
    }

    /// The dongle is away: said once, then discovering until it advertises,
    /// the controller checked at the search's pace. No escalation, no
    /// removal of its object, no blind attempts: discovery sees it return.
    mutating func confirmAway(evidence: String, _ actions: inout Actions) {
        let discovery: Discovery
        var since = history.lastSeen ?? now
        if case .outage(_, .away(let listening)) = current {
            discovery = listening.discovery
            since = listening.since
        } else {
            discovery = discoveryGoingOn(&actions)
        }
        actions.append(.report(.dongleAway(lastSeen: history.lastSeen, evidence: evidence)))
        current.outage?.searchChecks = 0
        cancelTimer(.searchCheck, &actions)
        startTimer(.searchCheck, after: searchCheckDelay, &actions)
        var away = Away(phase: .confirmed(evidence: evidence), discovery: discovery, since: since)
        // Heard since the dongle was last seen: this place has others.
        away.scan.othersHeard = history.othersHeardAt.map { $0 >= since } ?? false
        startTimer(.scanWatch, after: away.scan.othersHeard ? settings.scanStallAfter : settings.discoveryRenewal, &actions)
        enter(.away(away), "the dongle is away (\(evidence)); connecting when it advertises", &actions)
    }

    /// While searching or away: a scan that heard others and now hears
    /// nobody has stalled (discovery again, then the controller steps); in
    /// a quiet place the discovery session is renewed. Re-armed lazily from
    /// the last time anyone was heard.
    mutating func scanWatchFired(_ actions: inout Actions) {
        guard var scan = current.scanWatch, let discovery = current.discovery else { return }
        guard scan.othersHeard, let heardAt = history.othersHeardAt else {
            // Quiet: nothing to judge; a fresh session in case it stalled.
            if discovery.running {
                actions.append(.stopDiscovery)
                setDiscovery(started: startDiscovery(&actions))
            }
            return startTimer(.scanWatch, after: settings.discoveryRenewal, &actions)
        }
        let silentFor = now - heardAt
        if silentFor < settings.scanStallAfter {
            return startTimer(.scanWatch, after: settings.scanStallAfter - silentFor, &actions)
        }
        if scan.stallRestarts == 0 {
            scan.stallRestarts = 1
            setScanWatch(scan)
            actions.append(.report(.scanStalled(silentFor: silentFor, restarting: true)))
            if discovery.running { actions.append(.stopDiscovery) }
            setDiscovery(started: startDiscovery(&actions))
            return startTimer(.scanWatch, after: settings.scanStallAfter, &actions)
        }
        // Started again and still nobody: the controller.
        actions.append(.report(.scanStalled(silentFor: silentFor, restarting: false)))
        let steps = settings.escalation.filter { $0 != .rfkillUnblock }
        guard !steps.isEmpty else {
            scan.stallRestarts += 1
            setScanWatch(scan)
            return startTimer(.scanWatch, after: pacedDelay(settings.scanStallAfter, doubled: scan.stallRestarts - 1), &actions)
        }
        stopDiscoveryIfRunning(&actions)
        escalate(steps, reconnectRequested: false, cause: "the scan stalled: nobody heard for \(silentFor.roundedText)", &actions)
    }
}
