import HCI
import LinkPolicy
import LinkSupervisor
import USBDevice

/// The kernel's side of the Bluetooth controllers, which the link service
/// reaches around bluetoothd: an HCI reset, a USB reset or rebind, the
/// controller's own answer to a command, and the kernel's controller list.
///
/// A protocol so that the deterministic simulation can put its simulated
/// controller behind the same calls (`make dst` has no kernel Bluetooth);
/// the daemon uses `SystemControllerKernel`.
///
/// Threading: `reset`, `recoverUSB` and `askVersion` may block for seconds
/// (the kernel re-probes a controller, a wedged one times out): the service
/// calls them from its blocking-work task, never on its loop. `controllers`
/// reads sysfs and is called on the loop.
public protocol ControllerKernel: Sendable {
    /// `hci-reset` on the controller named like `hci0`.
    func reset(_ controller: String) async -> Result<Void, LinkFailure>
    /// `usb-reset` or `usb-rebind` of the USB device under the controller.
    func recoverUSB(_ step: EscalationStep, controller: String) async -> Result<Void, LinkFailure>
    /// Whether the controller answers a command of its own (HCI Read Local
    /// Version) within `timeout`.
    func askVersion(_ controller: String, timeout: Duration) async -> HCIController.Answer
    /// The controllers the kernel has, with their flags.
    func controllers() -> [KernelController]
    /// What the controller named like `hci0` is attached by, and its
    /// driver; nil when the kernel has no such controller (or cannot be asked).
    func transport(of controller: String) -> ControllerTransport?
}

/// The real kernel: libbluetooth's ioctls, usbfs and btusb's sysfs files.
public struct SystemControllerKernel: ControllerKernel {
    public init() {}

    public func reset(_ controller: String) async -> Result<Void, LinkFailure> {
        HCIController.reset(controller).mapError { LinkFailure(.fatal, $0.description) }
    }

    public func recoverUSB(_ step: EscalationStep, controller: String) async -> Result<Void, LinkFailure> {
        let device: ControllerUSBDevice
        switch ControllerUSBDevice.locate(controller: controller) {
        case .success(let found): device = found
        case .failure(let failure): return .failure(LinkFailure(.fatal, failure.description))
        }
        let result = step == .usbRebind ? device.rebind() : device.reset()
        return result.mapError { LinkFailure(.fatal, "\(device): \($0)") }
    }

    public func askVersion(_ controller: String, timeout: Duration) async -> HCIController.Answer {
        HCIController.askVersion(controller, timeout: timeout)
    }

    public func controllers() -> [KernelController] {
        KernelControllers.list()
    }

    public func transport(of controller: String) -> ControllerTransport? {
        KernelControllers.controller(named: controller).map { ControllerTransport.read($0) }
    }
}
