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

/// Blocking work (HCI reset, USB reset and rebind, the controller check), off the loop.
extension LinkService {
    enum BlockingJob: Sendable {
        case hciReset(String)
        /// `usb-reset`, `usb-rebind` or `uart-reattach` on the controller named.
        case reprobe(EscalationStep, controller: String)
        /// Whether the controller named answers a command of its own (the
        /// supervisor's check `check`).
        case checkController(String, check: Int)
    }

    /// The controller's answer to a version request comes in milliseconds;
    /// the kernel gives up on an unanswered command after 2 s
    /// (HCI_CMD_TIMEOUT), so 5 s leaves room for one queued before ours.
    static let controllerCheckTimeout: Duration = .seconds(5)

    /// A child task on `blockingWork`: an HCI reset and a USB reset or
    /// rebind are calls that can block for seconds, which the loop must never do.
    func runBlockingJobs() async {
        for await job in blockingJobs {
            switch job {
            case .hciReset(let name):
                let result = await kernel.reset(name)
                loop.execute { [self] in lane.escalationStepDone(.hciReset, result) }
            case .reprobe(let step, let controller):
                let result = await kernel.reprobe(step, controller: controller, unit: config.reconnect.uartUnit)
                loop.execute { [self] in lane.escalationStepDone(step, result) }
            case .checkController(let name, let id):
                let check: ControllerCheck
                switch await kernel.askVersion(name, timeout: Self.controllerCheckTimeout) {
                case .answered: check = .responsive
                case .silent: check = .unresponsive("\(name) did not answer HCI Read Local Version within \(Self.controllerCheckTimeout.roundedText)")
                case .notAsked(let why): check = .unknown(why)
                }
                loop.execute { [self] in
                    if case .unknown(let why) = check { report.logger.debug("controller check: \(why)") }
                    deliver(.controllerChecked(check: id, check))
                }
            }
        }
    }
}
