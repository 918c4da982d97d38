/// Escalation steps after an exhausted window (`reconnect.escalate` in the
/// config); raw values are the config's spellings.
public enum EscalationStep: String, Sendable, Equatable, CaseIterable {
    /// Adapter1.Powered off and on again through bluetoothd.
    case powerCycle = "power-cycle"
    /// HCIDEVDOWN and HCIDEVUP on the controller (CAP_NET_ADMIN).
    case hciReset = "hci-reset"
    /// USBDEVFS_RESET on the controller's USB device: the kernel re-probes it.
    case usbReset = "usb-reset"
    /// btusb unbound from the controller's USB interface and bound again.
    case usbRebind = "usb-rebind"
    /// Clears an rfkill soft block on the controller. Listed, it also runs
    /// at once whenever a soft block holds the adapter off.
    case rfkillUnblock = "rfkill-unblock"
    /// The unit that attaches a UART controller with hciattach or btattach
    /// (`reconnect.uart_unit`, `hciuart.service` by default) restarted
    /// through systemd: the line discipline lets go of the controller and
    /// is set anew. Not for a controller the kernel attached itself (a
    /// serdev driver): no unit attaches that one.
    case uartReattach = "uart-reattach"

    /// Steps that need no adapter in bluetoothd, only the kernel's
    /// controller: they can recover one that failed its initialisation.
    /// Each takes the controller away and brings it back (often under
    /// another index).
    public var reprobesController: Bool { self == .usbReset || self == .usbRebind || self == .uartReattach }
}
