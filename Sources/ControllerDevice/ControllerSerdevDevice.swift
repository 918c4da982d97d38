#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A UART controller the kernel attached itself: a serdev device on the
/// `serial` bus (`/sys/bus/serial/devices/serial0-0`, declared by the device
/// tree or ACPI) whose driver (`hci_uart_bcm` on a Raspberry Pi) made the
/// controller under it (`serial0-0/bluetooth/hci0`). No program attached
/// it, so no unit can attach it again; unbinding its driver and probing the
/// device again is what re-attaches it (the kernel runs the driver's probe
/// and setup as at boot, and the controller comes back, often as another
/// `hciN`).
///
/// Invariant: only a device that holds a Bluetooth controller is unbound
/// (a GPS or modem on another serdev port is never touched); the probe
/// after it binds whichever driver the kernel itself picks, as at boot.
/// Writing `unbind` and `drivers_probe` is root's: the package's
/// `tether-serdev-rebind@.service` does it (`tether serdev-rebind`).
public struct ControllerSerdevDevice: Sendable, Equatable, CustomStringConvertible {
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Not a serdev device's name (`serial0-0`): a path, or empty.
        case badName(String)
        case noDevice(port: String)
        /// Bound to a driver that made no Bluetooth controller.
        case notBluetooth(port: String, driver: String)
        case write(file: String, errno: Int32)

        public var description: String {
            switch self {
            case .badName(let name): "\"\(name)\" is not a serdev device's name (such as serial0-0)"
            case .noDevice(let port): "no serial device \(port) in /sys/bus/serial/devices (not a serdev device: a controller attached by hciattach or btattach has a unit to restart instead)"
            case .notBluetooth(let port, let driver): "\(port) is driven by \(driver), which holds no Bluetooth controller: left alone"
            case .write(let file, let code):
                "writing \(file) failed: \(Sysfs.describe(code))"
                    + (code == EACCES || code == EPERM || code == EROFS ? " (needs root and a writable /sys/bus/serial: tether-serdev-rebind@.service has both)" : "")
            }
        }
    }

    /// The serdev device, like `serial0-0`.
    public var port: String
    /// Its sysfs directory.
    public var devicePath: String
    /// Its driver, like `hci_uart_bcm`; nil while none is bound.
    public var driver: String?
    /// The controllers under it, like `["hci0"]`: empty while unbound.
    public var controllers: [String]

    public var description: String { "\(port) (\(driver ?? "no driver bound"))" }

    /// A device name the kernel gives a serdev device: letters, digits, `-`, `_`, `.`, `:`.
    public static func isPortName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && name.utf8.count <= 64
            && name.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-_.:".unicodeScalars.contains($0)) }
    }

    /// Finds the serdev device `port` under `sysfs` (default `/sys`).
    public static func locate(port: String, sysfs: String = "/sys") -> Result<ControllerSerdevDevice, Failure> {
        guard isPortName(port) else { return .failure(.badName(port)) }
        guard let devicePath = Sysfs.resolvedPath("\(sysfs)/bus/serial/devices/\(port)") else { return .failure(.noDevice(port: port)) }
        let controllers = Sysfs.entries(of: "\(devicePath)/bluetooth").filter { $0.hasPrefix("hci") }
        return .success(ControllerSerdevDevice(port: port, devicePath: devicePath, driver: Sysfs.driver(of: devicePath), controllers: controllers))
    }

    /// Unbinds the driver (when one is bound and it made a Bluetooth
    /// controller) and asks the bus to probe the device again, which binds
    /// the driver the kernel picks for it. A device left unbound (a rebind
    /// cut short) only needs the probe.
    public func rebind(sysfs: String = "/sys") -> Result<Void, Failure> {
        if let driver {
            guard !controllers.isEmpty else { return .failure(.notBluetooth(port: port, driver: driver)) }
            let unbind = "\(sysfs)/bus/serial/drivers/\(driver)/unbind"
            if let code = Sysfs.write(port, to: unbind) { return .failure(.write(file: unbind, errno: code)) }
        }
        let probe = "\(sysfs)/bus/serial/drivers_probe"
        if let code = Sysfs.write(port, to: probe) { return .failure(.write(file: probe, errno: code)) }
        return .success(())
    }
}
