import LinkPolicy

/// Pairing, a bond the dongle refuses, and the removal of its device object
/// (a refused bond's, or a stale one's).
extension Supervisor {
    /// Services resolved on a device without a bond, and Tether pairs: the
    /// pairing gets its own deadline (an agent's answer, a passkey entry).
    mutating func startPairing(_ setup: LinkSetup, cause: String, _ actions: inout Actions) {
        let pair = nextOperation()
        cancelTimer(.attemptDeadline, &actions)
        startTimer(.attemptDeadline, after: settings.pairingTimeout, &actions)
        enter(.pairing(setup, pair: pair), "\(cause); the dongle holds no bond: pairing", &actions)
        actions.append(.pair(attempt: pair, timeout: settings.pairingTimeout))
    }

    mutating func pairFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        guard case .outage(_, .pairing(var setup, let pair)) = current, pair == id else { return }
        switch result {
        case .success:
            actions.append(.report(.paired))
            setup.paired = true
            cancelTimer(.attemptDeadline, &actions)
            startTimer(.attemptDeadline, after: policy.connectTimeout, &actions)
            startSubscribing(setup, cause: "paired", &actions)
        case .failure(let failure) where failure.unauthenticatedBond:
            // Not the dongle's proof: the link is dropped unused, the bond
            // removed, and the windows cool down until an operator looks
            // (status's bond row); each cooldown's attempt pairs anew, one
            // removal each, never a loop.
            actions.append(.report(.pairingFailed(error: failure.description, unauthenticated: true)))
            current.outage?.bondLoss = .reported(problem: "\(failure.description); Tether removed that bond")
            attemptFailed(setup.window, LinkFailure(.fatal, "pairing failed: \(failure.description)"), cancel: true, &actions)
            removeRefusedBond(&actions)
        case .failure(let failure):
            actions.append(.report(.pairingFailed(error: failure.description)))
            attemptFailed(setup.window, LinkFailure(failure.kind, "pairing failed: \(failure.description)"), cancel: true, &actions)
        }
    }

    /// The dongle refused the bond bluetoothd holds. Tether renews it once
    /// per outage when it pairs: RemoveDevice takes the object and its keys,
    /// discovery finds the dongle anew, and the next attempt pairs. A second
    /// refusal in the same outage, or one while Tether does not pair, is
    /// reported once and left to the operator (status says what to do);
    /// attempts go on in their windows, never as a loop of re-pairings.
    /// A refusal ends a link (the kernel says why it ended): one that was
    /// online has ended, and this outage begins with the refusal.
    mutating func bondRejected(_ detail: String, _ actions: inout Actions) {
        guard observation.devicePresent, observation.deviceBonded else { return }
        if case .online = current { linkEnding(cause: "the dongle refused its bond (\(detail))", &actions) }
        guard let outage = current.outage else { return }
        current.outage?.dropsBeforeResolve = 0
        history.lastError = "the dongle refused its bond (\(detail)): it has lost its keys (a factory reset?)"
        switch outage.bondLoss {
        case .reported, .removing:
            return
        case .renewed:
            // Renewed already in this outage and refused again: said once,
            // then left to the windows and the operator.
            let why = "Tether removed the bond and paired again once in this outage already, and does not loop: check the dongle, then `tether reconnect`"
            current.outage?.bondLoss = .reported(problem: "the dongle refuses its new bond too; \(why)")
            return actions.append(.report(.bondLost(detail: detail, repairing: false, why: why)))
        case .none:
            break
        }
        guard settings.pairs else {
            let why = "dongle.pairing is \"never\": remove the bond (bluetoothctl remove <address>) and pair again, or set dongle.pairing"
            current.outage?.bondLoss = .reported(problem: "the dongle refuses its bond; \(why)")
            return actions.append(.report(.bondLost(detail: detail, repairing: false, why: why)))
        }
        current.outage?.bondLoss = .removing
        actions.append(.report(.bondLost(detail: detail, repairing: true, why: nil)))
        removeRefusedBond(&actions)
    }

    /// Asks for the removal of the refused bond, unless one is in flight.
    mutating func removeRefusedBond(_ actions: inout Actions) {
        guard let outage = current.outage, outage.removal == nil else { return }
        let removal = nextOperation()
        current.outage?.removal = removal
        actions.append(.removeDevice(removal))
    }

    /// A connect on a bonded device came up and dropped before services
    /// resolved: a refused bond shows so on D-Bus alone (bluetoothd 5.66
    /// answers Connect with "le-connection-abort-by-local" in `make e2e`, or
    /// "br-connection-canceled" by its sources), but so does a bad radio moment, so
    /// only a run of them counts, and only while the kernel's reasons are
    /// not heard.
    mutating func droppedBeforeResolving(_ error: String, _ actions: inout Actions) {
        // The kernel would have said so (Device Disconnected reason 4): a
        // dongle out of reach or a busy channel drops links early too.
        guard !observation.disconnectReasonsHeard else { return }
        current.outage?.dropsBeforeResolve += 1
        let drops = current.outage?.dropsBeforeResolve ?? 0
        guard drops >= settings.dropsBeforeResolveForBondLoss else { return }
        bondRejected("\(drops) connects in a row dropped before services resolved, last: \(error)", &actions)
    }

    // MARK: Removing the device object

    /// Removes the dongle's object (once per outage) when the window's
    /// failures point at a stale one (`shouldRemoveStaleDevice`).
    mutating func removeStaleDeviceIfDue(_ window: Window, _ actions: inout Actions) {
        guard shouldRemoveStaleDevice(window) else { return }
        current.outage?.removedStaleDevice = true
        // Any removal in flight is superseded: only this one's answer counts.
        let removal = nextOperation()
        current.outage?.removal = removal
        actions.append(.report(.staleDeviceRemoved(failures: window.staleFailures, lastError: window.lastStaleError ?? "")))
        actions.append(.removeDevice(removal))
    }

    /// Most of the window's failures pointed at a stale device object, it was
    /// not removed yet in this outage, and the config allows it for this device.
    func shouldRemoveStaleDevice(_ window: Window) -> Bool {
        guard current.outage?.removedStaleDevice != true, window.staleFailures > 0, window.staleFailures * 2 >= window.attempts,
              deviceKnown
        else { return false }
        switch settings.staleDeviceRemoval {
        case .never: return false
        // A bond Tether made itself it makes again (`Settings.pairs`): kept,
        // the stale object would refuse every connect for good.
        case .unbonded: return !observation.deviceBonded || settings.pairs
        case .always: return true
        }
    }

    /// The removal's answer. Once done, bluetoothd's InterfacesRemoved takes
    /// the device away (after this reply: BlueZ sends it from an idle
    /// callback) and discovery finds it anew; a failure is only told. The
    /// answer to a removal of an outage that is over is stale.
    mutating func removeDeviceFinished(_ id: Int, _ result: Result<Void, LinkFailure>, _ actions: inout Actions) {
        guard let outage = current.outage, outage.removal == id else { return }
        current.outage?.removal = nil
        guard case .failure(let failure) = result else {
            if outage.bondLoss == .removing { current.outage?.bondLoss = .renewed }
            // Removed: an attempt on it now would meet UnknownObject.
            current.outage?.deviceObjectGone = observation.devicePresent
            return
        }
        actions.append(.report(.staleDeviceRemovalFailed(error: failure.description)))
    }
}
