import BlueZ
import DBus
import LinkSupervisor

/// Faults: which, when and for how long, all from the seed. A fault under
/// way holds back the recovery check; once none is, Tether must be online
/// within the bound (`Invariant.recoversAfterFaults`).
extension Simulation {
    /// Every error `BlueZError.classify` distinguishes, as a Connect would return it.
    static let connectErrors: [BlueZError] = [
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByLocal),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.connectionTimeout),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.abortByRemote),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.busy),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.refused),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.concurrentLimit),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.gattBrowsing),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.keyMissing),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.unknown),
        BlueZError(name: BlueZ.ErrorName.failed, message: BlueZ.FailedMessage.inProgressText),
        BlueZError(name: BlueZ.ErrorName.inProgress, message: "In Progress"),
        BlueZError(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready"),
        BlueZError(name: BlueZ.ErrorName.alreadyConnected, message: "Already Connected"),
        BlueZError(name: BlueZ.ErrorName.doesNotExist, message: "Does Not Exist"),
        BlueZError(name: DBusErrorName.unknownObject, message: "Method \"Connect\" doesn't exist"),
        BlueZError(name: DBusErrorName.noReply, message: "Did not receive a reply"),
        BlueZError(name: DBusErrorName.serviceUnknown, message: "The name is not activatable"),
        BlueZError(name: BlueZ.ErrorName.notPermitted, message: "Not Permitted"),
        BlueZError(name: BlueZ.ErrorName.notAuthorized, message: "Not Authorized"),
        BlueZError(name: BlueZ.ErrorName.notSupported, message: "Not Supported"),
        BlueZError(name: "org.bluez.Error.SomethingNew", message: "an error nobody classified"),
    ]

    func injectFault() {
        if now < faultsUntil {
            schedule(.nextFault, after: random.exponential(mean: settings.faultEvery) + .milliseconds(1))
        }
        guard now < faultsUntil else { return }
        let kind = random.pick(FaultKind.allCases)
        // The latest any fault may end: the run must end recovered.
        let latestEnd = faultsUntil + .seconds(60)
        func lasting(_ range: ClosedRange<Duration>) -> Duration {
            min(random.duration(range), max(.zero, latestEnd - now))
        }
        faultCounts[kind.index] += 1
        recoveryGeneration += 1
        lastClearAt = nil
        switch kind {
        case .linkDrop:
            record(.faultStarts(kind, world.connected ? "" : "(no link to drop)"))
            if world.connected {
                world.dropLink()
                publishObservation()
            }
        case .connectErrors:
            let error = random.pick(Self.connectErrors)
            world.connectError = error
            record(.faultStarts(kind, "\(error.description) (\(error.disposition.rawValue))"))
            beginOngoing(kind, for: lasting(.seconds(5) ... .seconds(900)))
        case .inProgress:
            record(.faultStarts(kind, "a connect stuck in bluetoothd"))
            world.stuckConnect = true
        case .slowReplies:
            record(.faultStarts(kind, ""))
            world.slowReplies = true
            beginOngoing(kind, for: lasting(.seconds(10) ... .seconds(600)))
        case .bluetoothdCrash:
            record(.faultStarts(kind, ""))
            bluetoothdGone()
            beginOngoing(kind, for: lasting(.seconds(1) ... .seconds(60)))
        case .adapterPowerOff:
            record(.faultStarts(kind, ""))
            if world.adapterPresent, world.bluezUp { adapterOff("someone") }
            beginOngoing(kind, for: lasting(.seconds(2) ... .seconds(300)))
        case .controllerRenumbered:
            record(.faultStarts(kind, "hci\(world.adapterIndex) removed"))
            world.adapterPresent = false
            world.deviceObject = false
            world.removalUnsignalled = false
            adapterOff("controller removed")
            beginOngoing(kind, for: lasting(.milliseconds(500) ... .seconds(10)))
        case .dongleAsleep:
            record(.faultStarts(kind, ""))
            world.dongleAway = true
            if world.connected {
                world.dropLink()
                publishObservation()
            }
            beginOngoing(kind, for: lasting(.seconds(10) ... .seconds(7200)))
        case .applicationHung:
            record(.faultStarts(kind, ""))
            world.applicationHung = true
            beginOngoing(kind, for: lasting(.seconds(10) ... .seconds(1800)))
        case .gattChanged:
            guard world.connected, world.servicesResolved else {
                return record(.faultStarts(kind, "(no link: nothing to change)"))
            }
            record(.faultStarts(kind, "objects move"))
            world.characteristicsReady = false
            world.notifySession = false
            world.gattGeneration += 1
            publishObservation()
            deliver(.characteristicsChanged)
            schedule(.characteristicsBack(gattGeneration: world.gattGeneration), after: random.duration(.milliseconds(50) ... .seconds(5)))
        case .staleDevice:
            record(.faultStarts(kind, "bluetoothd's object no longer fits the dongle"))
            world.staleObject = true
            if world.connected {
                world.dropLink()
                publishObservation()
            }
            beginOngoing(kind, for: lasting(.seconds(60) ... .seconds(3600)))
        case .diskFull:
            record(.faultStarts(kind, ""))
            disk.full = true
            beginOngoing(kind, for: lasting(.seconds(1) ... .seconds(1200)))
        case .diskEIO:
            record(.faultStarts(kind, ""))
            disk.failing = true
            beginOngoing(kind, for: lasting(.seconds(1) ... .seconds(600)))
        case .shortWrites:
            record(.faultStarts(kind, ""))
            disk.shortWrites = true
            beginOngoing(kind, for: lasting(.seconds(10) ... .seconds(3600)))
        case .tetherKilled:
            record(.faultStarts(kind, ""))
            guard tetherAlive else { return }
            killTether("SIGKILL")
            beginOngoing(kind, for: nil)
            schedule(.tetherStarts, after: random.duration(.seconds(1) ... .seconds(10)))
        case .tetherKilledMidWrite:
            record(.faultStarts(kind, "in the next write"))
            guard tetherAlive else { return }
            disk.dieInNextWrite = true
            beginOngoing(kind, for: nil)
        case .tetherRestarted:
            record(.faultStarts(kind, ""))
            guard tetherAlive else { return }
            stopTether(graceful: true)
            beginOngoing(kind, for: nil)
            schedule(.tetherStarts, after: random.duration(.milliseconds(500) ... .seconds(3)))
        case .wallClockJump:
            let jump = random.duration(.seconds(1) ... .seconds(366 * 86400))
            wallOffset += random.chance(0.5) ? jump : .zero - jump
            record(.faultStarts(kind, "by \(jump.simulationStamp)"))
        case .reconnectRequest:
            record(.faultStarts(kind, ""))
            deliver(.reconnectRequested)
        }
        scheduleRecoveryCheckIfClear()
    }

    /// A fault under way; `duration` nil: it ends when Tether starts again.
    private func beginOngoing(_ kind: FaultKind, for duration: Duration?) {
        ongoing[kind.index] += 1
        ongoingTotal += 1
        if let duration { schedule(.faultEnds(kind), after: duration) }
    }

    func endOngoing(_ kind: FaultKind) {
        guard ongoing[kind.index] > 0 else { return }
        ongoing[kind.index] -= 1
        ongoingTotal -= 1
        if kind == .tetherKilledMidWrite || kind == .tetherKilled || kind == .tetherRestarted {
            record(.faultEnds(kind))
        }
        scheduleRecoveryCheckIfClear()
    }

    func endFault(_ kind: FaultKind) {
        guard ongoing[kind.index] > 0 else { return }
        record(.faultEnds(kind))
        let last = ongoing[kind.index] == 1
        switch kind {
        case .connectErrors where last: world.connectError = nil
        case .slowReplies where last: world.slowReplies = false
        case .bluetoothdCrash where last:
            world.bluezUp = true
            world.adapterPowered = world.adapterPresent
            record(.world("bluetoothd is back (hci\(world.adapterIndex) powered)"))
            publishObservation()
        case .adapterPowerOff where last:
            if world.adapterPresent, world.bluezUp, !world.adapterPowered {
                world.adapterPowered = true
                publishObservation()
            }
        case .controllerRenumbered where last:
            world.adapterIndex += 1
            world.adapterPresent = true
            world.adapterPowered = true
            world.deviceObject = true  // bluetoothd restores the device from its storage
            record(.world("the controller is back as hci\(world.adapterIndex)"))
            publishObservation()
        case .dongleAsleep where last: world.dongleAway = false
        case .applicationHung where last: world.applicationHung = false
        case .staleDevice where last:
            if world.staleObject {
                world.staleObject = false
                record(.world("someone removed the stale object; bluetoothd knows the dongle anew"))
            }
        case .diskFull where last: disk.full = false
        case .diskEIO where last: disk.failing = false
        case .shortWrites where last: disk.shortWrites = false
        default: break
        }
        ongoing[kind.index] -= 1
        ongoingTotal -= 1
        scheduleRecoveryCheckIfClear()
    }

    /// bluetoothd crashes: its objects, sessions and pending calls go with it.
    private func bluetoothdGone() {
        world.bluezUp = false
        world.dropLink()
        world.pendingConnect = nil
        world.stuckConnect = false
        world.notifySession = false
        world.discovering = false
        advertisementGeneration += 1
        publishObservation()
    }

    private func scheduleRecoveryCheckIfClear() {
        guard ongoingTotal == 0 else { return }
        recoveryGeneration += 1
        lastClearAt = now
        schedule(.recoveryCheck(generation: recoveryGeneration), after: settings.recoveryBound)
    }
}
