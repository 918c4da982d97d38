import LinkPolicy
import LinkSupervisor
import USBDevice

/// The `usb-reset` and `usb-rebind` escalation steps, as escalation results.
/// Blocking (the kernel re-probes the controller before the call returns):
/// run off the loop.
enum USBRecovery {
    static func run(_ step: EscalationStep, controller: String) -> Result<Void, LinkFailure> {
        let device: ControllerUSBDevice
        switch ControllerUSBDevice.locate(controller: controller) {
        case .success(let found): device = found
        case .failure(let failure): return .failure(LinkFailure(.fatal, failure.description))
        }
        let result = step == .usbRebind ? device.rebind() : device.reset()
        return result.mapError { LinkFailure(.fatal, "\(device): \($0)") }
    }
}
