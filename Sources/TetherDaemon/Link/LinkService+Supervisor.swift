import BlueZ
import Configuration
import DBus
import EventLoop
import FoundationEssentials
import LinkPolicy
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import HCI
import LinkSupervisor
import Logging
import Readings
import Rfkill
import Synchronization
import ControllerDevice

/// The supervisor: events in, in order; its actions carried out in the order decided.
extension LinkService {
    /// Hands `event` to the supervisor and carries out its actions. An event
    /// raised while that happens (a reply that completed at once) waits its
    /// turn, so actions are performed in the order they were decided.
    func deliver(_ event: SupervisorEvent) {
        queuedEvents.append(event)
        guard !handlingEvent else { return }
        handlingEvent = true
        defer { handlingEvent = false }
        processQueuedEvents()
    }

    /// Events raised while one was handled, in the order they came.
    func processQueuedEvents() {
        var index = 0
        while index < queuedEvents.count {
            process(queuedEvents[index])
            index += 1
        }
        queuedEvents.removeAll(keepingCapacity: true)
    }

    /// A loop turn carried notifications. Online, that only moves the
    /// supervisor's last-data mark: no action and no change of status, so
    /// the bookkeeping of `process` (metrics, the shared status, publishing)
    /// is skipped; it is once per turn, up to a thousand times a second, and
    /// cost about 1.5 µs per reading at 2,000/s (`make bench`).
    func dataArrived() {
        guard !handlingEvent, queuedEvents.isEmpty, supervisor.state == .online else {
            return deliver(.dataReceived)
        }
        let now = start.duration(to: loop.now)
        let before = decisionObserver.map { _ in supervisor.status }
        let actions = supervisor.handle(.dataReceived, at: now)
        if let before { decisionObserver?(SupervisorDecision(event: .dataReceived, statusBefore: before, actions: actions, status: supervisor.status)) }
        guard !actions.isEmpty || supervisor.state != .online else { return }
        handlingEvent = true
        defer { handlingEvent = false }
        carryOut(actions, of: .dataReceived, at: now)
        processQueuedEvents()
    }

    func process(_ event: SupervisorEvent) {
        let now = start.duration(to: loop.now)
        let before = decisionObserver.map { _ in supervisor.status }
        let actions = supervisor.handle(event, at: now)
        if let before { decisionObserver?(SupervisorDecision(event: event, statusBefore: before, actions: actions, status: supervisor.status)) }
        carryOut(actions, of: event, at: now)
        followLinkWithManagementSocket()
    }

    /// The kernel's management socket carries every controller's Device
    /// Found events as well as the Device Disconnected ones it is read for:
    /// one per advertising report of every device while discovery runs,
    /// hundreds a second in a busy street (`make e2e`'s busy-street: four
    /// times the idle CPU while away). So it is open only while a link is
    /// made or held, and closed while the dongle is away, searched for or
    /// cooled down from (each entered long after a link's end, whose reason
    /// has arrived by then). An open that failed is not tried again.
    func followLinkWithManagementSocket() {
        guard kernelReasons, managementUsable else { return }
        switch supervisor.state {
        case .away, .searching, .coolingDown:
            guard management != nil else { return }
            readManagementEvents()  // a reason already queued is not lost
            closeManagementSocket()
        default:
            if management == nil { openManagementSocket() }
        }
    }

    /// Records what the supervisor decided on `event` and performs it, in order.
    ///
    /// After the keep-alive's own steps (`Supervisor.leavesStatusAsItWas`:
    /// most of an idle daemon's steps) the supervisor's status is as it was.
    /// So unless the resolution changed too, the status is not built, stored
    /// or compared: that bookkeeping copied the supervisor twice per step.
    func carryOut(_ actions: [SupervisorAction], of event: SupervisorEvent, at now: Duration) {
        metrics?.observe(event, actions: actions, at: now)
        if resolutionChangedSincePublish || !Supervisor.leavesStatusAsItWas(event, deciding: actions) {
            let status = supervisor.status
            metrics?.observe(status, at: now)
            shared.withLock { s in
                s.supervisor = status
                if let since = status.awaySince {
                    if s.awaySince == nil { s.awaySince = start + since }
                } else {
                    s.awaySince = nil
                }
                if status.state == .online {
                    if s.connectedSince == nil { s.connectedSince = loop.now }
                    #if DST_BUG_STATUS_WALL_AGES
                    if s.connectedSinceWall == nil { s.connectedSinceWall = wallClock() }
                    #endif
                } else {
                    s.connectedSince = nil
                    #if DST_BUG_STATUS_WALL_AGES
                    s.connectedSinceWall = nil
                    #endif
                }
            }
            publishIfChanged(actions, status: status)
        }
        for action in actions {
            switch action {
            case .startTimer(let timer, let delay):
                timers.start(timer, after: delay) { [unowned self] fired in deliver(.timerFired(fired)) }
            case .cancelTimer(let timer):
                timers.cancel(timer)
            case .transition(let from, let to, let cause):
                report.transition(from: from, to: to, cause: cause, device: resolution.device?.address ?? config.dongle.address)
            case .report(.disconnected(let unexpected)):
                dropNoticed(unexpected: unexpected)
            case .report(let item):
                if case .connected = item, let address = resolution.device?.address {
                    dongleSeen()
                    bindOnFirstLink(to: address)
                }
                report.report(item, state: supervisor.state, device: resolution.device?.address, missing: lane.missingCharacteristics(), at: now)
            case .answerReconnect(.started(let attempt)):
                requests.answerAll(.started(attempt: attempt))
            case .answerReconnect(.notReady(let why)):
                requests.answerAll(.notReady(why))
            case .subscribe:
                // A socket from an earlier subscribe that has not seen its
                // end yet would make AcquireNotify say "Notify acquired".
                closeNotifyReaders()
                lane.perform(action)
            case .escalate(let step, let run) where step == .rfkillUnblock || step.reprobesController:
                guard let controller = controllerName(adapter: resolution.adapter?.interfaceName) else {
                    deliver(.escalationFinished(step, run: run, .failure(LinkFailure(.transient, "no controller"))))
                    continue
                }
                report.logger.warning(
                    "escalating: \(step.rawValue) on \(controller)", metadata: ["event": "escalation", "step": "\(step.rawValue)"]
                )
                lane.perform(action)  // marks the step in flight
                if step == .rfkillUnblock {
                    lane.escalationStepDone(step, unblockRadio(controller))
                } else {
                    blockingInput.yield(.reprobe(step, controller: controller))
                }
            case .checkController(let id):
                guard let adapter = resolution.adapter else {
                    deliver(.controllerChecked(check: id, .unknown("no adapter")))
                    continue
                }
                blockingInput.yield(.checkController(adapter.interfaceName, check: id))
            case .escalate(.hciReset, let run):
                guard let adapter = resolution.adapter else {
                    deliver(.escalationFinished(.hciReset, run: run, .failure(LinkFailure(.transient, "no adapter"))))
                    continue
                }
                report.logger.warning("escalating: hci-reset on \(adapter.interfaceName)", metadata: ["event": "escalation"])
                lane.perform(action)  // marks the step in flight; its result comes from the blocking job
                blockingInput.yield(.hciReset(adapter.interfaceName))
            default:
                lane.perform(action)
            }
        }
    }

    /// The part of the status whose changes are announced (PropertiesChanged,
    /// STATUS=); readings counters change too often and are read on demand.
    struct PublishedFields: Equatable {
        var supervisor: Supervisor.Status
        var device: String?
        var adapter: String?
        /// Whether any reading was written since start ("no reading yet").
        var anyReading: Bool
        var adapterProblem: String?
        var bootloader: String?
    }

    /// `status`: the supervisor's, if the caller has it at hand.
    func publishIfChanged(_ actions: [SupervisorAction], status supervisorStatus: Supervisor.Status? = nil) {
        let supervisorStatus = supervisorStatus ?? supervisor.status
        guard supervisorStatus != published?.supervisor || resolutionChangedSincePublish
            || anyReadingWritten != published?.anyReading || adapterProblem != published?.adapterProblem
        else { return }
        resolutionChangedSincePublish = false
        let current = PublishedFields(
            supervisor: supervisorStatus, device: resolution.device?.address ?? config.dongle.address,
            adapter: resolution.adapter?.interfaceName, anyReading: anyReadingWritten, adapterProblem: adapterProblem,
            bootloader: identity.bootloader
        )
        guard current != published else { return }
        published = current
        var transition: (from: SupervisorState, to: SupervisorState, cause: String)?
        for case .transition(let from, let to, let cause) in actions { transition = (from, to, cause) }
        changeInput.yield(LinkStatusChange(status: status, transition: transition))
    }

    /// The wall clock was stepped (ClockSetWatch). The moments the control
    /// interface announces as dates (ConnectedSince, LastDisconnectAt,
    /// AwaySince) were dated in the old clock's frame when they changed;
    /// announced again, they are dated in the new one (the status dates
    /// loop instants from the wall clock's reading now). Nothing else
    /// changes: the supervisor's decisions run on the monotonic clock.
    public func clockWasSet() {
        changeInput.yield(LinkStatusChange(status: status, transition: nil))
    }
}
