import EventLoop
import HCI
import LinkPolicy
import LinkSupervisor
import Simulator
import TetherDaemon

/// The kernel's side of the simulated controller, behind the same calls the
/// daemon makes on a gateway (`ControllerKernel`): an HCI reset is the
/// simulator's (a lockup cleared, the links gone, the adapter powered off
/// and on), the controller check asks whether the simulator's controller is
/// locked up (and a locked-up one makes the check wait out its timeout), and
/// the controller is no USB device, as a virtual one is not. A seed may
/// deny HCI commands (`permitted` false: a gateway without CAP_NET_ADMIN),
/// as the kernel does with `EPERM`.
///
/// Threading: the daemon calls it from its blocking-work task, which in the
/// simulation prefers the daemon's virtual loop; the calls hop to the
/// simulator's loop and back, on virtual time.
struct SimulatedControllerKernel: ControllerKernel {
    let simulator: Simulator
    /// The daemon's loop, on whose timers a check of a locked-up controller waits.
    let loop: EventLoop
    let permitted: Bool

    func reset(_ controller: String) async -> Result<Void, LinkFailure> {
        guard permitted else { return .failure(LinkFailure(.fatal, "\(controller): Operation not permitted")) }
        return await simulator.resetController() ? .success(()) : .failure(LinkFailure(.fatal, "\(controller): No such device"))
    }

    func reprobe(_ step: EscalationStep, controller: String, unit: String) async -> Result<Void, LinkFailure> {
        .failure(LinkFailure(.fatal, "\(controller) is neither a USB nor a UART device (a simulated controller)"))
    }

    func askVersion(_ controller: String, timeout: Duration) async -> HCIController.Answer {
        guard permitted else { return .notAsked("\(controller): Operation not permitted") }
        switch await simulator.controllerAnswer {
        case .answers:
            return .answered
        case .silent:
            try? await loop.sleep(for: timeout)
            return .silent
        case .absent:
            return .notAsked("\(controller): No such device")
        }
    }

    /// The simulation has no controller that failed its initialisation.
    func controllers() -> [KernelController] { [] }

    /// A virtual controller, as the simulated one is no USB device.
    func transport(of controller: String) -> ControllerTransport? {
        ControllerTransport(controller: controller, bus: .virtual)
    }
}
