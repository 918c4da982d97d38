import HCI
import LinkPolicy
import LinkSupervisor
import Systemd
import ControllerDevice

/// The kernel's side of the Bluetooth controllers, which the link service
/// reaches around bluetoothd: an HCI reset, a USB reset or rebind, the
/// controller's own answer to a command, and the kernel's controller list.
///
/// A protocol so that the deterministic simulation can put its simulated
/// controller behind the same calls (`make dst` has no kernel Bluetooth);
/// the daemon uses `SystemControllerKernel`.
///
/// Threading: `reset`, `reprobe` and `askVersion` may block for seconds
/// (the kernel re-probes a controller, a wedged one times out): the service
/// calls them from its blocking-work task, never on its loop. `controllers`
/// reads sysfs and is called on the loop.
public protocol ControllerKernel: Sendable {
    /// `hci-reset` on the controller named like `hci0`.
    func reset(_ controller: String) async -> Result<Void, LinkFailure>
    /// A step that takes the controller away and brings it back
    /// (`reprobesController`): `usb-reset` or `usb-rebind` of the USB device
    /// under it, or `uart-reattach` (`unit` restarted, the one that attaches it).
    func reprobe(_ step: EscalationStep, controller: String, unit: String) async -> Result<Void, LinkFailure>
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

    /// How long `uart-reattach` waits for systemd's job: hciuart.service's
    /// own start (hciattach or btattach, loading the firmware) takes a few
    /// seconds on a Raspberry Pi.
    public static let unitRestartTimeout: Duration = .seconds(30)

    public func reprobe(_ step: EscalationStep, controller: String, unit: String) async -> Result<Void, LinkFailure> {
        if step == .uartReattach {
            if let refusal = Self.uartReattachRefusal(controller: controller, transport: transport(of: controller), unit: unit) {
                return .failure(refusal)
            }
            return UnitRestart.restart(unit, timeout: Self.unitRestartTimeout).mapError { failure in
                LinkFailure(.fatal, failure.description + (failure.refused ? Self.refusedHint(unit) : ""))
            }
        }
        let device: ControllerUSBDevice
        switch ControllerUSBDevice.locate(controller: controller) {
        case .success(let found): device = found
        case .failure(let failure): return .failure(LinkFailure(.fatal, failure.description))
        }
        let result = step == .usbRebind ? device.rebind() : device.reset()
        return result.mapError { LinkFailure(.fatal, "\(device): \($0)") }
    }

    /// Why restarting `unit` cannot re-attach `controller` (nil: it can):
    /// not a UART controller, or one the kernel attached and `unit` is not
    /// the package's serdev rebind unit for its port (which the failure names).
    static func uartReattachRefusal(controller: String, transport: ControllerTransport?, unit: String) -> LinkFailure? {
        guard let transport, transport.bus == .uart else {
            return LinkFailure(.fatal, "\(controller) is not a UART controller: restarting \(unit) would not reach it")
        }
        guard transport.attachedByKernel, unit != transport.serdevRebindUnit else { return nil }
        return LinkFailure(
            .fatal, "\(controller) was attached by the kernel (\(transport.detail ?? "a serdev driver")), not by a unit: "
                + "restarting \(unit) would not attach it again" + transport.serdevRebindAdvice)
    }

    /// Why systemd may have refused the service's user: what an operator checks.
    static func refusedHint(_ unit: String) -> String {
        " (the package's polkit rule lets user tether restart \(unit) only if polkitd is installed and a config in "
            + "/etc/tether that polkitd's user can read lists uart-reattach with uart_unit = \"\(unit)\": tether polkit-check-unit -- \(unit) says)"
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
