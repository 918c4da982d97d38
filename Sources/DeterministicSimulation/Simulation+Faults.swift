import BlueZ
import DBus
import Simulator

/// Faults: which, when and for how long, all from the seed, injected through
/// the simulated bluetoothd's own knobs (as `tether-dev soak` does), the bus
/// daemon, the disk model and the Tether process. A fault under way holds
/// back the recovery check; once none is, Tether must be online within the
/// bound (`Invariant.recoversAfterFaults`).
extension Simulation {
    /// Every error `BlueZError.classify` distinguishes, as a Connect would return it.
    static let connectErrors: [(name: String, message: String)] = [
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.abortByLocal),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.connectionTimeout),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.abortByRemote),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.busy),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.refused),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.concurrentLimit),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.gattBrowsing),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.keyMissing),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.unknown),
        (BlueZ.ErrorName.failed, BlueZ.FailedMessage.inProgressText),
        (BlueZ.ErrorName.inProgress, "In Progress"),
        (BlueZ.ErrorName.notReady, "Resource Not Ready"),
        (BlueZ.ErrorName.alreadyConnected, "Already Connected"),
        (BlueZ.ErrorName.doesNotExist, "Does Not Exist"),
        (DBusErrorName.unknownObject, "Method \"Connect\" doesn't exist"),
        (BlueZ.ErrorName.notPermitted, "Not Permitted"),
        (BlueZ.ErrorName.notAuthorized, "Not Authorized"),
        (BlueZ.ErrorName.notSupported, "Not Supported"),
        ("org.bluez.Error.SomethingNew", "an error nobody classified"),
    ]

    /// The faults, one after another (a Poisson process), until `faultsUntil`;
    /// each fault's end is a child task that waits out its duration.
    func runFaults() async {
        await withDiscardingTaskGroup { group in
            while true {
                try? await worldLoop.sleep(for: random.exponential(mean: settings.faultEvery) + .milliseconds(1))
                guard now < faultsUntil, violation == nil else { return }
                let kind = random.pick(FaultKind.allCases)
                faultCounts[kind.index] += 1
                recoveryGeneration += 1
                lastClearAt = nil
                if let duration = await inject(kind) {
                    group.addTask { [self] in
                        try? await worldLoop.sleep(for: duration)
                        await endFault(kind)
                    }
                }
                scheduleRecoveryCheckIfClear()
            }
        }
    }

    /// Starts `kind`; returns how long it lasts, if it is one that ends by
    /// itself (nil: instantaneous, or it ends when Tether starts again).
    private func inject(_ kind: FaultKind) async -> Duration? {
        guard let simulator else { return nil }
        // The latest any fault may end: the run must end recovered.
        let latestEnd = faultsUntil + .seconds(60)
        func lasting(_ range: ClosedRange<Duration>) -> Duration {
            min(random.duration(range), max(.zero, latestEnd - now))
        }
        func ongoing(_ range: ClosedRange<Duration>) -> Duration {
            beginOngoing(kind)
            return lasting(range)
        }
        switch kind {
        case .linkDrop:
            record(.faultStarts(kind, ""))
            await simulator.dropLink(reason: random.pick(["link-loss", "timeout", "remote"]))
            return nil
        case .connectErrors:
            let error = random.pick(Self.connectErrors)
            record(.faultStarts(kind, "\(error.name): \(error.message)"))
            await simulator.failNextConnects(1_000_000, errorName: error.name, message: error.message)
            return ongoing(.seconds(5) ... .seconds(900))
        case .inProgress:
            record(.faultStarts(kind, "a connect left pending in bluetoothd"))
            await simulator.leaveConnectPending()
            return nil
        case .slowReplies:
            let latency = random.duration(.seconds(1) ... .seconds(40))
            record(.faultStarts(kind, "\(latency.simulationStamp) per connect and write request"))
            await simulator.setConnectLatency(latency)
            await simulator.setGattLatency(random.duration(.milliseconds(100) ... .seconds(8)))
            return ongoing(.seconds(10) ... .seconds(600))
        case .bluetoothdCrash:
            let down = lasting(.seconds(1) ... .seconds(60))
            record(.faultStarts(kind, "back after \(down.simulationStamp)"))
            beginOngoing(kind)
            await simulator.crash(restartAfter: down)
            return down + .milliseconds(100)
        case .bluetoothdHang:
            let hung = lasting(.seconds(1) ... .seconds(20))
            record(.faultStarts(kind, "for \(hung.simulationStamp)"))
            beginOngoing(kind)
            await simulator.hang(for: hung)
            return hung
        case .adapterPowerOff:
            record(.faultStarts(kind, ""))
            await simulator.setAdapterPowered(false)
            return ongoing(.seconds(2) ... .seconds(300))
        case .controllerRenumbered:
            record(.faultStarts(kind, "hci\(adapterIndex) removed"))
            await simulator.removeAdapter()
            return ongoing(.milliseconds(500) ... .seconds(10))
        case .controllerLockup:
            // One in three is the kind a power cycle does not clear (opening
            // the controller times out and it stays off): only an HCI reset does.
            let clearsOnPowerCycle = random.int(0...2) != 0
            record(.faultStarts(kind, clearsOnPowerCycle ? "until a power cycle or a reset" : "until a reset"))
            await simulator.setLockup(true, clearsOnPowerCycle: clearsOnPowerCycle)
            // Without a step that clears it the controller stays wedged:
            // a gateway's operator would power it off and on, later.
            return ongoing(.seconds(300) ... .seconds(900))
        case .dongleAway:
            let away = lasting(.seconds(10) ... .seconds(7200))
            record(.faultStarts(kind, "for \(away.simulationStamp)"))
            await simulator.sleep()
            beginOngoing(kind)
            return away
        case .applicationHung:
            record(.faultStarts(kind, ""))
            await simulator.hangApplication(attAnswers: true)
            return ongoing(.seconds(10) ... .seconds(1800))
        case .gattChanged:
            record(.faultStarts(kind, ""))
            await simulator.changeGattLayout()
            return nil
        case .staleDevice:
            record(.faultStarts(kind, "bluetoothd's object no longer fits the dongle"))
            await simulator.setStaleDevice(true)
            await simulator.dropLink(reason: "link-loss")
            return ongoing(.seconds(60) ... .seconds(3600))
        case .scanStall:
            let stall: Simulator.ScanStall = random.chance(0.7) ? .untilRestart : .untilReset
            record(.faultStarts(kind, stall.rawValue))
            await simulator.stallScan(stall)
            return ongoing(.seconds(60) ... .seconds(3600))
        case .busyStreet:
            let count = random.pick([80, 200])
            record(.faultStarts(kind, "\(count) other advertisers"))
            await simulator.setOtherAdvertisers(count)
            return ongoing(.seconds(60) ... .seconds(1800))
        case .forgedSignals:
            record(.faultStarts(kind, ""))
            await forge()
            return nil
        case .busRestart:
            record(.faultStarts(kind, "every connection closes"))
            beginOngoing(kind)
            await busDaemon.stop()
            checker.busLost()
            return lasting(.milliseconds(500) ... .seconds(5))
        case .diskFull:
            record(.faultStarts(kind, ""))
            disk.full = true
            return ongoing(.seconds(1) ... .seconds(1200))
        case .diskEIO:
            record(.faultStarts(kind, ""))
            disk.failing = true
            return ongoing(.seconds(1) ... .seconds(600))
        case .shortWrites:
            record(.faultStarts(kind, ""))
            disk.shortWrites = true
            return ongoing(.seconds(10) ... .seconds(3600))
        case .tetherKilled:
            record(.faultStarts(kind, ""))
            guard let tether, !tether.ended else { return nil }
            killTether()
            beginOngoing(kind)
            scheduleTetherStart(after: random.duration(.seconds(1) ... .seconds(10)))
            return nil
        case .tetherKilledMidWrite:
            record(.faultStarts(kind, "in the next write"))
            guard let tether, !tether.ended else { return nil }
            disk.dieInNextWrite = true
            beginOngoing(kind)
            return nil
        case .tetherRestarted:
            record(.faultStarts(kind, ""))
            guard let tether, !tether.ended else { return nil }
            beginOngoing(kind)
            await stopTether()
            scheduleTetherStart(after: random.duration(.milliseconds(500) ... .seconds(3)))
            return nil
        case .wallClockJump:
            let jump = random.duration(.seconds(1) ... .seconds(366 * 86400))
            wallOffset += random.chance(0.5) ? jump : .zero - jump
            record(.faultStarts(kind, "by \(jump.simulationStamp)"))
            checker.checkStatusAges(self)
            return nil
        case .reconnectRequest:
            record(.faultStarts(kind, ""))
            await requestReconnect()
            return nil
        }
    }

    /// A fault under way; it ends with `endFault` (or when Tether starts again).
    func beginOngoing(_ kind: FaultKind) {
        ongoing[kind.index] += 1
        ongoingTotal += 1
    }

    /// The end of a fault that ends when Tether starts again.
    func endOngoing(_ kind: FaultKind) {
        guard ongoing[kind.index] > 0 else { return }
        ongoing[kind.index] -= 1
        ongoingTotal -= 1
        record(.faultEnds(kind))
        scheduleRecoveryCheckIfClear()
    }

    func endFault(_ kind: FaultKind) async {
        guard ongoing[kind.index] > 0, let simulator else { return }
        record(.faultEnds(kind))
        let last = ongoing[kind.index] == 1
        switch kind {
        case .connectErrors where last: await simulator.failNextConnects(0, errorName: "", message: "")
        case .slowReplies where last:
            await simulator.setConnectLatency(settings.simulatorOptions.connectLatency)
            await simulator.setGattLatency(.zero)
        case .adapterPowerOff where last: await simulator.setAdapterPowered(true)
        case .controllerRenumbered where last:
            adapterIndex += 1
            try? await simulator.addAdapter(name: "hci\(adapterIndex)", address: SimulationSettings.adapterAddress)
        case .controllerLockup where last:
            await simulator.setLockup(false)
            await simulator.setAdapterPowered(true)
        case .dongleAway where last: await simulator.wake()
        case .applicationHung where last: await simulator.resumeApplication()
        case .staleDevice where last: await simulator.setStaleDevice(false)
        case .scanStall where last: await simulator.stallScan(nil)
        case .busyStreet where last: await simulator.setOtherAdvertisers(settings.otherAdvertisers)
        case .busRestart:
            await busDaemon.start()
            // bluetoothd's service comes back on the new bus (systemd starts it).
            await simulator.crash(restartAfter: .milliseconds(random.int(200...2000)))
        case .diskFull where last: disk.full = false
        case .diskEIO where last: disk.failing = false
        case .shortWrites where last: disk.shortWrites = false
        default: break
        }
        ongoing[kind.index] -= 1
        ongoingTotal -= 1
        scheduleRecoveryCheckIfClear()
    }

    func scheduleRecoveryCheckIfClear() {
        guard ongoingTotal == 0 else { return }
        recoveryGeneration += 1
        lastClearAt = now
        let generation = recoveryGeneration
        worldLoop.schedule(after: settings.recoveryBound) { [self] in checker.checkRecovery(self, generation: generation) }
    }
}
