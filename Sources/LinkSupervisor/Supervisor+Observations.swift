import LinkPolicy
import Pacing

/// What the world shows: bluetoothd's object tree (observations) and the
/// advertisements heard while discovering.
extension Supervisor {
    mutating func observe(_ new: LinkObservation, _ actions: inout Actions) {
        let old = observation
        observation = new
        if !new.devicePresent { current.outage?.deviceObjectGone = false }
        if new.radioBlock != old.radioBlock {
            actions.append(.report(new.radioBlock == .none ? .radioUnblocked : .radioBlocked(new.radioBlock)))
        }

        if !new.bluezReachable {
            // Told also when it was waited for already: a hung one that the
            // watchdog killed (systemd restarts it) is gone now.
            if old.bluezPresent && !new.bluezPresent { actions.append(.report(.bluezVanished)) }
            if case .outage(_, .waitingForBluez) = current { return }
            if new.bluezPresent, case .outage(_, .connecting) = current {
                // Hung, bluetoothd still holds this attempt's Connect in its
                // queue and serves it when it wakes. A Disconnect queued
                // behind it cancels it there (bluetoothd serves a client's
                // calls in order), so the next attempt's Connect does not
                // find it pending (`InProgress`: a wasted attempt and a
                // cancel; the DST's seed 43).
                actions.append(.disconnect)
            }
            linkGoneQuietly(&actions)
            return enter(.waitingForBluez, new.bluezPresent ? "bluetoothd does not answer" : "bluetoothd is not on the bus", &actions)
        }
        // An escalation switches the adapter off and on itself; it is
        // re-evaluated when the step finishes.
        if case .outage(_, .escalating) = current { return }
        if !new.adapterUsable {
            adapterBecameUnusable()
            switch current {
            case .online:
                actions.append(.report(.adapterUnavailable))
            case .outage(_, let recovery):
                switch recovery {
                case .waitingForAdapter: return considerAdapterRecovery(&actions)
                case .waitingForBluez: break
                case .searching, .connecting, .resolving, .pairing, .subscribing, .waitingForData, .backingOff,
                     .awaitingDisconnect, .escalating, .coolingDown, .away:
                    actions.append(.report(.adapterUnavailable))
                }
            }
            linkGoneQuietly(&actions)
            enter(.waitingForAdapter(powerOnRetries: nil), adapterProblem, &actions)
            return considerAdapterRecovery(&actions)
        }
        if history.adapterUsableSince == nil { history.adapterUsableSince = now }

        guard case .outage(_, let recovery) = current else {
            if !new.connected { linkLost(cause: "the link dropped", &actions) }
            return
        }
        switch recovery {
        case .waitingForBluez:
            if !old.bluezPresent, history.hasBeenOnline { actions.append(.report(.bluezAppeared)) }
            attemptOrSearch(
                window: Window(start: now), cause: old.bluezPresent ? "bluetoothd answers again" : "bluetoothd is on the bus",
                &actions)
        case .waitingForAdapter:
            cancelTimer(.powerOn, &actions)
            cancelTimer(.adapterRecovery, &actions)
            history.adapterUsableSince = now
            attemptOrSearch(window: Window(start: now), cause: "the adapter is powered on", &actions)
        case .searching:
            if deviceKnown {
                current.outage?.searchChecks = 0
                stopDiscoveryIfRunning(&actions)
                attemptAfterSearch(cause: "the dongle is known to bluetoothd", &actions)
            }
        case .away(let away):
            // Its object made anew by discovery: it advertised.
            if deviceKnown, !old.devicePresent { back(from: away, &actions) }
        case .connecting(var setup, let connect):
            // The Connect reply decides.
            if new.connected && !setup.connectedSeen {
                setup.connectedSeen = true
                update(.connecting(setup, connect: connect))
            }
        case .resolving(var setup):
            if new.connected { setup.connectedSeen = true }
            if !new.connected && (old.connected || setup.connectedSeen) {
                linkLost(cause: "the link dropped while resolving services", &actions)
            } else if new.linkReady {
                startSubscribing(setup, &actions)
            } else {
                update(.resolving(setup))
            }
        case .pairing:
            if !new.connected { linkLost(cause: "the link dropped while pairing", &actions) }
        case .subscribing, .waitingForData:
            if !new.connected { linkLost(cause: "the link dropped", &actions) }
        case .awaitingDisconnect(let wait):
            guard !new.connected else { return }
            cancelTimer(.disconnectDeadline, &actions)
            if wait.requested { actions.append(.report(.disconnected(unexpected: false))) }
            scheduleAttempt(window: windowAfterLoss(wait.window, requested: wait.requested), cause: wait.cause, &actions)
        case .backingOff, .coolingDown, .escalating:
            break
        }
    }

    /// Another device was heard: the controller hears the air. A scan that
    /// heard nobody so far is watched for a stall from now.
    mutating func othersAdvertising(_ actions: inout Actions) {
        history.othersHeardAt = now
        if var scan = current.scanWatch {
            let quietUntilNow = !scan.othersHeard
            scan.othersHeard = true
            scan.stallRestarts = 0
            setScanWatch(scan)
            // Taken for a quiet place so far (the window's connects ran
            // without discovery: nobody heard yet at the verdict; a
            // search begun where nobody was heard), busy now: from here
            // silence is a stall, not the session's renewal ten minutes
            // on (`make e2e`'s scan-stalled).
            if quietUntilNow {
                cancelTimer(.scanWatch, &actions)
                startTimer(.scanWatch, after: settings.scanStallAfter, &actions)
            }
        }
        evidenceArrived("other devices are heard advertising", &actions)
    }

    mutating func dongleAdvertising(_ actions: inout Actions) {
        history.lastSeen = now
        if case .outage(_, .away(let away)) = current {
            guard deviceKnown else { return }
            return back(from: away, &actions)
        }
        if case .outage(let outage, .searching) = current, outage.deviceObjectGone, observation.devicePresent {
            // An advertisement on the dongle's object after bluetoothd said
            // it was gone: it has the dongle again.
            current.outage?.deviceObjectGone = false
            current.outage?.searchChecks = 0
            cancelTimer(.searchCheck, &actions)
            stopDiscoveryIfRunning(&actions)
            return attemptAfterSearch(cause: "the dongle is advertising", &actions)
        }
        guard case .outage(_, .coolingDown(var cooldown)) = current else { return }
        let silentSince = cooldown.lastAdvertisement ?? cooldown.listeningSince
        cooldown.lastAdvertisement = now
        update(.coolingDown(cooldown))
        // Seen again after a silence: it woke up (or was woken).
        guard deviceKnown, now - silentSince >= settings.advertisingSilence else { return }
        cancelTimer(.retry, &actions)
        stopDiscoveryIfRunning(&actions)
        attempt(window: Window(start: now, fromAdvertisement: true), cause: "the dongle is advertising", &actions)
    }

    /// The dongle that was away advertises: connect at once. Its window is
    /// one opened by an advertisement, so connects that fail now are a
    /// fault, not another absence.
    mutating func back(from away: Away, _ actions: inout Actions) {
        if case .listening(let window, _, _) = away.phase {
            // Heard while Tether was still making up its mind: it was there
            // all along, so the connects that found nobody are a fault.
            return listenedInVain(window, &actions)
        }
        current.outage?.searchChecks = 0
        stopDiscoveryIfRunning(&actions)
        actions.append(.report(.dongleBack(awayFor: now - away.since)))
        attempt(
            window: Window(start: now, fromAdvertisement: true),
            cause: "the dongle advertises again after \((now - away.since).roundedText) away", &actions)
    }
}
