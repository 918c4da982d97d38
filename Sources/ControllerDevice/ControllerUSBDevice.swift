#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The USB device under a Bluetooth controller, found through sysfs:
/// `/sys/class/bluetooth/hciN/device` is the USB interface btusb bound
/// (`…/1-1/1-1:1.0`), its parent the USB device (`…/1-1`), whose `busnum`
/// and `devnum` name its node `/dev/bus/usb/BBB/DDD`.
///
/// The recovery steps a wedged USB controller needs when bluetoothd and HCI
/// no longer reach it: a port reset (`USBDEVFS_RESET`) or btusb unbound and
/// bound again. Either makes the kernel probe the controller anew, often
/// under another `hciN`. Both block for up to seconds: run them off any loop.
public struct ControllerUSBDevice: Sendable, Equatable, CustomStringConvertible {
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// The controller is not in sysfs (gone, or never there).
        case noController(String)
        /// The controller is not on USB (vhci, UART, SDIO).
        case notUSB(controller: String, bus: String)
        case unreadable(path: String, errno: Int32)
        case reset(node: String, errno: Int32)
        case rebind(file: String, errno: Int32)

        public var description: String {
            switch self {
            case .noController(let name): "no controller \(name) in sysfs"
            case .notUSB(let name, let bus): "\(name) is not a USB controller (its bus is \(bus))"
            case .unreadable(let path, let code): "cannot read \(path): \(Sysfs.describe(code))"
            case .reset(let node, let code):
                "USBDEVFS_RESET on \(node) failed: \(Sysfs.describe(code))"
                    + (code == EACCES || code == EPERM ? " (the tether group needs write access: the package's udev rule gives it, and the unit's DeviceAllow= the node)" : "")
            case .rebind(let file, let code):
                "writing \(file) failed: \(Sysfs.describe(code))"
                    + (code == EACCES || code == EPERM || code == EROFS ? " (needs root and a writable /sys: see usb-rebind in tether.toml(5))" : "")
            }
        }
    }

    /// The controller, like `hci0`.
    public var controller: String
    /// The USB interface btusb binds, like `1-1:1.0`.
    public var interface: String
    /// The USB device's sysfs directory.
    public var devicePath: String
    /// `/dev/bus/usb/BBB/DDD`.
    public var node: String
    /// The interface's driver, like `btusb`; nil while none is bound.
    public var driver: String?

    public var description: String { "\(controller) on USB \(interface) (\(node))" }

    /// Finds the USB device of `controller` under `sysfs` (default `/sys`)
    /// with its node under `dev` (default `/dev`).
    public static func locate(controller: String, sysfs: String = "/sys", dev: String = "/dev") -> Result<ControllerUSBDevice, Failure> {
        guard Sysfs.resolvedPath("\(sysfs)/class/bluetooth/\(controller)") != nil else { return .failure(.noController(controller)) }
        // A controller with no parent device is a virtual one (vhci).
        guard let interfacePath = Sysfs.resolvedPath("\(sysfs)/class/bluetooth/\(controller)/device") else {
            return .failure(.notUSB(controller: controller, bus: "virtual"))
        }
        let bus = Sysfs.resolvedPath("\(interfacePath)/subsystem").map(Sysfs.lastComponent) ?? "unknown"
        guard bus == "usb" else { return .failure(.notUSB(controller: controller, bus: bus)) }
        let devicePath = Sysfs.parent(interfacePath)
        guard let busText = Sysfs.readLine("\(devicePath)/busnum"), let busNumber = Int(busText) else {
            return .failure(.unreadable(path: "\(devicePath)/busnum", errno: errno))
        }
        guard let devText = Sysfs.readLine("\(devicePath)/devnum"), let deviceNumber = Int(devText) else {
            return .failure(.unreadable(path: "\(devicePath)/devnum", errno: errno))
        }
        let node = "\(dev)/bus/usb/\(threeDigits(busNumber))/\(threeDigits(deviceNumber))"
        let driver = Sysfs.driver(of: interfacePath)
        return .success(ControllerUSBDevice(
            controller: controller, interface: Sysfs.lastComponent(interfacePath), devicePath: devicePath, node: node,
            driver: driver
        ))
    }

    /// `USBDEVFS_RESET`: the port is reset and the device's drivers probe it
    /// again. Needs write access to the node.
    public func reset() -> Result<Void, Failure> {
        let fd = open(node, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.reset(node: node, errno: errno)) }
        defer { _ = close(fd) }
        // _IO('U', 20): no size or direction bits, the same number on every
        // architecture Linux shares its generic ioctl encoding with (x86, arm64).
        let usbdevfsReset: UInt = 0x5514
        guard ioctl(fd, usbdevfsReset, 0) == 0 else { return .failure(.reset(node: node, errno: errno)) }
        return .success(())
    }

    /// Unbinds `driver` (btusb) from the interface and binds it again.
    /// Writes `<sysfs>/bus/usb/drivers/<driver>/{unbind,bind}`: root's.
    public func rebind(driver: String = "btusb", sysfs: String = "/sys") -> Result<Void, Failure> {
        let directory = "\(sysfs)/bus/usb/drivers/\(driver)"
        // An interface nobody has bound (a rebind cut short) only needs the bind.
        if self.driver == driver || Sysfs.driver(of: "\(devicePath)/\(interface)") == driver {
            if let code = Sysfs.write(interface, to: "\(directory)/unbind") { return .failure(.rebind(file: "\(directory)/unbind", errno: code)) }
        }
        if let code = Sysfs.write(interface, to: "\(directory)/bind") { return .failure(.rebind(file: "\(directory)/bind", errno: code)) }
        return .success(())
    }

    static func threeDigits(_ number: Int) -> String {
        let text = String(number)
        return String(repeating: "0", count: max(0, 3 - text.count)) + text
    }
}
