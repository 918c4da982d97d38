import ControllerDevice

/// What a controller is, for an operator: its bus, the driver that drives
/// it and the device it hangs on, as the kernel shows them.
///
/// The bus comes from the controller itself (HCIGETDEVINFO); the rest from
/// sysfs: `/sys/class/bluetooth/hciN/device` is the USB interface btusb
/// bound (`1-1:1.0`), a serdev device whose driver is `hci_uart_bcm` or
/// another `hci_uart_*` (`serial0-0`, the Raspberry Pi's onboard radio
/// under Raspberry Pi OS), or the tty a line discipline was set on by
/// `hciattach`/`btattach` (`ttyAMA0`; `hci_uart` drives it, with no driver
/// link in sysfs). A controller on a pseudo-terminal, or a virtual one
/// (vhci), has no device at all.
public struct ControllerTransport: Sendable, Equatable, CustomStringConvertible {
    public var controller: String
    public var bus: ControllerBus
    /// `btusb`, `hci_uart_bcm`, `hci_uart`; nil when the kernel names none.
    public var driver: String?
    /// The device the controller hangs on: `1-1:1.0`, `serial0-0`, `ttyAMA0`.
    public var port: String?
    /// A UART controller the kernel attached itself: a serdev device (from
    /// the device tree or ACPI) with a driver bound, such as `hci_uart_bcm`
    /// on `serial0-0`, the Raspberry Pi's onboard radio under current
    /// Raspberry Pi OS. No program attached it, so restarting the unit of
    /// one does not attach it again (that image's `hciuart.service` does
    /// nothing when the kernel manages the radio): rebinding its driver does
    /// (`serdevRebindUnit`). False for a line discipline a program set on a
    /// tty (`hciattach`, `btattach`).
    public var attachedByKernel: Bool

    public init(controller: String, bus: ControllerBus, driver: String? = nil, port: String? = nil, attachedByKernel: Bool = false) {
        self.controller = controller
        self.bus = bus
        self.driver = driver
        self.port = port
        self.attachedByKernel = attachedByKernel
    }

    /// The unit the package ships to re-attach a controller the kernel
    /// attached itself: `tether-serdev-rebind@serial0-0.service` rebinds the
    /// serdev driver of `serial0-0` as root (`tether serdev-rebind`). Nil for
    /// every other controller (a unit that runs `hciattach` or `btattach`
    /// re-attaches those, and USB ones have their own steps).
    public var serdevRebindUnit: String? {
        guard attachedByKernel, let port else { return nil }
        return "tether-serdev-rebind@\(port).service"
    }

    /// What an operator is told to set when `uart-reattach` restarts a unit
    /// that cannot re-attach this controller; empty when no unit of the
    /// package's would either.
    public var serdevRebindAdvice: String {
        serdevRebindUnit.map { "; set reconnect.uart_unit = \"\($0)\", which rebinds its serdev driver" } ?? ""
    }

    /// "UART (hci_uart on ttyAMA0)", "USB (btusb on 1-1:1.0)", "virtual".
    public var description: String {
        detail.map { "\(bus.displayName) (\($0))" } ?? bus.displayName
    }

    /// The driver and the device: "hci_uart on ttyAMA0"; nil when neither is known.
    public var detail: String? {
        let text = [driver, port.map { "on \($0)" }].compactMap { $0 }.joined(separator: " ")
        return text.isEmpty ? nil : text
    }

    /// Reads the driver and device of `controller` (from `list()` or
    /// `controller(named:)`) under `sysfs` (default `/sys`).
    public static func read(_ controller: KernelController, sysfs: String = "/sys") -> ControllerTransport {
        var transport = ControllerTransport(controller: controller.name, bus: controller.bus)
        let device = Sysfs.resolvedPath("\(sysfs)/class/bluetooth/\(controller.name)/device")
        if let device {
            transport.port = Sysfs.lastComponent(device)
            transport.driver = Sysfs.driver(of: device)
            // A tty has no driver link: a bound driver on a UART
            // controller's device is a serdev driver's.
            transport.attachedByKernel = controller.bus == .uart && transport.driver != nil
        }
        // A line discipline is no driver of the tty it sits on: hci_uart
        // drives the controller all the same (and, on a pseudo-terminal,
        // the controller has no device in sysfs).
        if controller.bus == .uart, transport.driver == nil { transport.driver = "hci_uart" }
        return transport
    }
}
