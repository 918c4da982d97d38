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

/// Why the link dropped: the kernel's management socket and bluetoothd's liveness.
extension LinkService {
    /// Where reasons can come from on this system; nil when none can.
    var reasonSource: String? {
        if kernelReasons, managementUsable { return "the kernel's management socket" }
        return bluezSendsReasons ? "bluetoothd's Device1.Disconnected" : nil
    }

    /// Why no reason can come, for the log line.
    var reasonUnavailableWhy: String {
        "bluetoothd (before 5.83) does not say, and \(managementUnavailable)"
    }

    /// Opens the management socket if the kernel will tell it why links
    /// drop; says once, at debug level, why not (a unit without
    /// CAP_NET_ADMIN, a kernel without Bluetooth): every drop's line says it too.
    func openManagementSocket() {
        switch ManagementSocket.open() {
        case .success(let socket) where socket.trusted:
            management = socket
            managementWatch = loop.watch(socket.descriptor, interest: .readable) { [unowned self] _ in
                readManagementEvents()
            }
            report.logger.debug("disconnect reasons from the kernel's management socket")
        case .success(let socket):
            socket.close()
            managementUsable = false
            managementUnavailable = "Tether lacks CAP_NET_ADMIN, without which the kernel does not send the reason"
            report.logger.debug("no disconnect reasons: \(managementUnavailable)")
        case .failure(let failure):
            managementUsable = false
            managementUnavailable = "the kernel's management socket cannot be opened (\(failure))"
            report.logger.debug("no disconnect reasons: \(managementUnavailable)")
        }
    }

    func closeManagementSocket() {
        if let managementWatch { loop.removeWatch(managementWatch) }
        managementWatch = nil
        management?.close()
        management = nil
    }

    /// The kernel's Device Disconnected events for the dongle, on the
    /// controller in use (any, while none is resolved).
    func readManagementEvents() {
        guard let socket = management else { return }
        let index = resolution.adapter.flatMap { Int($0.interfaceName.dropFirst(3)) }
        for case .deviceDisconnected(let controller, let address, _, let code) in socket.readEvents() {
            guard index == nil || Int(controller) == index, address == deviceAddress.uppercased() else { continue }
            let heard = DisconnectReasons.Reason(managementCode: code)
            reasonHeard(heard, address: address)
            if heard == .authenticationFailure {
                deliver(.bondRejected("the kernel ended the link for an authentication failure (Device Disconnected reason 4)"))
            }
        }
        if let failure = socket.failure {
            managementUnavailable = failure
            managementUsable = false
            report.logger.warning("no more disconnect reasons: \(failure)")
            closeManagementSocket()
            kernelViewChanged()
        }
    }

    /// Adds to bluetoothd's view what only the kernel shows: rfkill's block
    /// on the controller and a controller that failed its initialisation.
    func annotated(_ resolution: LinkResolver.Resolution) -> LinkResolver.Resolution {
        var result = resolution
        result.observation.radioBlock = radioBlock(adapter: resolution.adapter?.interfaceName)
        result.observation.controllerFailed = resolution.adapter == nil && initCheck.failed != nil
        // Heard while a link is made or held (the socket is closed between).
        result.observation.disconnectReasonsHeard = kernelReasons && managementUsable
        result.observation.bluezAnswering = liveness.unansweredSince == nil
        return result
    }

    /// bluetoothd stopped answering, or answers again (`BluezLiveness`).
    func bluezAnsweringChanged(_ since: MonotonicInstant?) {
        let previous = shared.withLock { s in
            defer { s.bluezUnansweredSince = since }
            return s.bluezUnansweredSince
        }
        if since != nil {
            report.logger.error(
                "bluetoothd owns org.bluez but did not answer a D-Bus ping within \(BluezLiveness.pingTimeout.roundedText) after a call to it went unanswered: it is hung, not gone, and nothing reaches the dongle through it; Tether waits for it and asks again every 5 to 10 s (the package's bluetooth.service drop-in has systemd restart a hang of 10 s; else `systemctl restart bluetooth` ends it)",
                metadata: ["event": "bluez-unresponsive"]
            )
        } else if let previous {
            report.logger.notice(
                "bluetoothd answers again after \(previous.duration(to: loop.now).roundedText)", metadata: ["event": "bluez-answers"]
            )
        }
        kernelViewChanged()
    }

    /// A new bluetoothd (or none): the old one's silence no longer counts.
    func forgetBluezLiveness() {
        liveness.reset()
        shared.withLock { $0.bluezUnansweredSince = nil }
    }

    /// Hands the supervisor the observation if it changed.
    func deliverObservationIfChanged() {
        lane.resolution = resolution
        guard resolution.observation != lastObservation else { return }
        lastObservation = resolution.observation
        deliver(.observed(resolution.observation))
        lane.observationChanged(resolution.observation)
    }

    /// Something only the kernel shows changed: the observation is annotated again.
    func kernelViewChanged() {
        resolution = annotated(resolution)
        deliverObservationIfChanged()
        updateAdapterProblem()
    }


    /// The supervisor reported a drop: logged now, its reason with it or
    /// after it (`DropAccount`).
    func dropNoticed(unexpected: Bool) {
        let device = resolution.device?.address ?? config.dongle.address
        carryOut(drops.dropNoticed(
            unexpected: unexpected, address: deviceAddress, device: device, at: start.duration(to: loop.now),
            source: reasonSource, unavailableWhy: reasonUnavailableWhy))
    }

    /// The kernel or bluetoothd said why the dongle's link dropped.
    func reasonHeard(_ reason: DisconnectReasons.Reason, address: String) {
        carryOut(drops.reasonHeard(reason, address: address, at: start.duration(to: loop.now)))
    }

    func carryOut(_ effects: [DropAccount.Effect]) {
        for effect in effects {
            switch effect {
            case .logDrop(let unexpected, let reason, let source, let why, let device):
                lastDropAt = (wallClock(), loop.now)
                report.disconnected(
                    unexpected: unexpected, reason: reason?.rawValue, toFollowFrom: source, why: why, state: supervisor.state,
                    device: device)
            case .logReason(let reason, let why, _, let device):
                // The drop awaiting its reason is the last one logged.
                report.dropReason(reason.rawValue, why: why, droppedAt: lastDropAt?.wall ?? wallClock(), state: supervisor.state, device: device)
            case .count(let reason):
                metrics?.disconnected(reason: reason)
                let at = lastDropAt?.instant ?? loop.now
                shared.withLock { s in
                    s.lastDisconnectReason = reason.rawValue
                    s.lastDisconnectAt = at
                }
            case .startWait(let wait):
                if let dropWait { loop.cancelTimer(dropWait) }
                dropWait = loop.schedule(after: wait) { [unowned self] in
                    dropWait = nil
                    carryOut(drops.waitEnded())
                }
            case .cancelWait:
                if let dropWait { loop.cancelTimer(dropWait) }
                dropWait = nil
            }
        }
    }
}
