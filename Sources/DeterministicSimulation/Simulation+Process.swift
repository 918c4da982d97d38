import Foundation
import LinkCore
import LinkSupervisor
@_spi(FaultInjection) import Readings

/// The Tether process: started, killed, stopped; events handed to its
/// supervisor one at a time, as `LinkService.deliver` does.
extension Simulation {
    func startTether() {
        guard !tetherAlive else { return }
        incarnation += 1
        supervisor = Supervisor(settings: settings.supervisor, seed: seed &+ UInt64(incarnation))
        disk.resetAfterDeath()
        do {
            let log = try ReadingLog(directory: directory, rotateSize: settings.rotateSize, retainSize: settings.retainSize)
            let disk = self.disk
            log.writeCall = { fd, bytes in disk.write(fd, bytes) }
            log.truncateCall = { fd, size in disk.truncate(fd, size) }
            record(.tether("started (process \(incarnation)); log: \(relative(log.recovery.description))"))
            self.log = log
        } catch {
            // The daemon exits 73 when the readings directory cannot be used;
            // on the model's tmpfs that is a fault of the simulation itself.
            violated(.readingsExactlyOnce, "the readings log cannot be opened after a restart: \(error)")
            return
        }
        audit.check(self)
        tetherAlive = true
        recorder = RecorderState()
        escalation = EscalationRun()
        escalationTimerGeneration += 1
        lastObservation = nil
        lastConnectID = 0
        checker.processStarted(self)
        endOngoing(.tetherKilled)
        endOngoing(.tetherKilledMidWrite)
        endOngoing(.tetherRestarted)
        // The monitor's first look at bluetoothd's tree.
        publishObservation()
    }

    /// SIGKILL: nothing is written, closed or cancelled; what bluetoothd held
    /// for this client (its notify session, its discovery) ends with it.
    func killTether(_ why: String) {
        guard tetherAlive else { return }
        record(.tether("killed: \(why)"))
        tetherAlive = false
        recorder.loseBacklog(self, reason: "killed")
        log?.close()
        log = nil
        forgetProcess()
    }

    /// SIGTERM: the turn's readings and the backlog are written and synced
    /// (`ReadingRecorder.close`), then the process leaves.
    func stopTether(graceful: Bool) {
        guard tetherAlive else { return }
        record(.tether("stopping (SIGTERM)"))
        drainBacklog()
        if tetherAlive {  // a write that died kills it
            try? log?.sync()
            if recorder.backlog.count > 0 || recorder.pendingGap > 0 {
                let diskRefuses = disk.full || disk.failing
                if !diskRefuses {
                    violated(.stopDrains, "\(recorder.backlog.count) readings unwritten at stop with a working disk")
                }
                recorder.loseBacklog(self, reason: "stopped while the disk refused them (exit 74)")
            }
            checker.count(.stopDrains)
            log?.close()
            log = nil
            tetherAlive = false
            record(.tether("stopped"))
        }
        forgetProcess()
    }

    private func forgetProcess() {
        world.notifySession = false
        if world.discovering {
            world.discovering = false
            advertisementGeneration += 1
        }
        queuedEvents.removeAll()
        timerGenerationBase += 1_000_000
        for index in timerGenerations.indices { timerGenerations[index] = timerGenerationBase }
        recorder.syncGeneration += 1
        recorder.retryGeneration += 1
        checker.processEnded()
    }

    // MARK: The supervisor's inputs

    /// Hands `event` to the supervisor and carries out its actions; an event
    /// raised meanwhile waits its turn (actions are never interleaved).
    func deliver(_ event: SupervisorEvent) {
        guard tetherAlive else { return }
        queuedEvents.append(event)
        guard !handlingEvent else { return }
        handlingEvent = true
        var index = 0
        while index < queuedEvents.count, tetherAlive {
            process(queuedEvents[index])
            index += 1
        }
        queuedEvents.removeAll(keepingCapacity: true)
        handlingEvent = false
    }

    private func process(_ event: SupervisorEvent) {
        record(.event(event))
        checker.willHandle(event, self)
        let statusBefore = supervisor.status
        let actions = supervisor.handle(event, at: now)
        checker.handled(self, event: event, statusBefore: statusBefore, actions: actions)
        if let cleared = lastClearAt, supervisor.state == .online {
            longestRecovery = max(longestRecovery, now - cleared)
            lastClearAt = nil
        }
        for action in actions {
            record(.action(action))
            checker.willPerform(action, self)
            perform(action)
        }
    }

    /// What the adapter layer sends whenever bluetoothd's tree changes what it resolves to.
    func publishObservation() {
        guard tetherAlive else { return }
        let observation = world.observation
        guard observation != lastObservation else { return }
        lastObservation = observation
        deliver(.observed(observation))
        carryOut(escalation.adapterChanged(escalationAdapter))
    }

    // MARK: Timers (`SupervisorTimers`: one of each at a time)

    func startTimer(_ timer: SupervisorTimer, after delay: Duration) {
        timerGenerations[timer.slot] += 1
        schedule(.supervisorTimer(timer, generation: timerGenerations[timer.slot]), after: delay)
    }

    func cancelTimer(_ timer: SupervisorTimer) {
        timerGenerations[timer.slot] += 1
    }

    /// `text` without the run's directory (it holds the process id): traces are the same on every run.
    func relative(_ text: String) -> String {
        text.replacingOccurrences(of: directory + "/", with: "")
    }

    /// The wall clock now, as a reading's timestamp: it jumps with `wallOffset`.
    var wallClock: Date {
        Date(timeIntervalSince1970: 1_800_000_000 + Double((now + wallOffset).milliseconds) / 1000)
    }
}
