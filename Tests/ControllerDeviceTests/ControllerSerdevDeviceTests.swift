import FoundationEssentials
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@testable import ControllerDevice

/// A sysfs tree in a temporary directory shaped like a Raspberry Pi's under
/// current Raspberry Pi OS: the onboard radio on the serdev device
/// `serial0-0` (driver `hci_uart_bcm`, controller `hci0`), and a GPS on
/// `serial1-0` whose driver made no Bluetooth controller.
@Suite struct ControllerSerdevDeviceTests {
    let root: String
    var sysfs: String { "\(root)/sys" }

    init() throws {
        root = try TemporaryDirectory("tether-serdev").path
        let radio = "\(root)/sys/devices/platform/soc/fe201000.serial/serial0/serial0-0"
        let gps = "\(root)/sys/devices/platform/soc/fe201a00.serial/serial1/serial1-0"
        for directory in ["\(radio)/bluetooth/hci0", gps, "\(root)/sys/bus/serial/devices",
                          "\(root)/sys/bus/serial/drivers/hci_uart_bcm", "\(root)/sys/bus/serial/drivers/gnss-ubx"] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        for file in ["drivers/hci_uart_bcm/unbind", "drivers/gnss-ubx/unbind", "drivers_probe"] {
            #expect(FileManager.default.createFile(atPath: "\(root)/sys/bus/serial/\(file)", contents: Data()))
        }
        try link(radio, at: "\(root)/sys/bus/serial/devices/serial0-0")
        try link(gps, at: "\(root)/sys/bus/serial/devices/serial1-0")
        try link("\(root)/sys/bus/serial/drivers/hci_uart_bcm", at: "\(radio)/driver")
        try link("\(root)/sys/bus/serial/drivers/gnss-ubx", at: "\(gps)/driver")
    }

    func link(_ target: String, at path: String) throws {
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    func contents(_ file: String) -> String {
        FileManager.default.contents(atPath: "\(root)/sys/bus/serial/\(file)").map { String(decoding: $0, as: UTF8.self) } ?? "(none)"
    }

    @Test func findsTheRadiosDriverAndController() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try ControllerSerdevDevice.locate(port: "serial0-0", sysfs: sysfs).get()
        #expect(device.driver == "hci_uart_bcm")
        #expect(device.controllers == ["hci0"])
        #expect(device.description == "serial0-0 (hci_uart_bcm)")
    }

    @Test func rebindUnbindsTheDriverThenProbesTheDeviceAgain() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try ControllerSerdevDevice.locate(port: "serial0-0", sysfs: sysfs).get()
        try device.rebind(sysfs: sysfs).get()
        #expect(contents("drivers/hci_uart_bcm/unbind") == "serial0-0")
        #expect(contents("drivers_probe") == "serial0-0")
    }

    /// A rebind cut short leaves the device with no driver (and so no
    /// controller): the probe alone attaches it again.
    @Test func anUnboundDeviceIsOnlyProbed() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.removeItem(atPath: "\(root)/sys/devices/platform/soc/fe201000.serial/serial0/serial0-0/driver")
        try FileManager.default.removeItem(atPath: "\(root)/sys/devices/platform/soc/fe201000.serial/serial0/serial0-0/bluetooth")
        let device = try ControllerSerdevDevice.locate(port: "serial0-0", sysfs: sysfs).get()
        #expect(device.driver == nil && device.controllers.isEmpty)
        try device.rebind(sysfs: sysfs).get()
        #expect(contents("drivers/hci_uart_bcm/unbind") == "")
        #expect(contents("drivers_probe") == "serial0-0")
    }

    /// The unit runs as root: it must never unbind a serial device that
    /// holds no Bluetooth controller, nor take a path for a device's name.
    @Test func aDeviceWithoutAControllerAndANameThatIsAPathAreLeftAlone() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let gps = try ControllerSerdevDevice.locate(port: "serial1-0", sysfs: sysfs).get()
        #expect(gps.rebind(sysfs: sysfs).failure == .notBluetooth(port: "serial1-0", driver: "gnss-ubx"))
        #expect(contents("drivers/gnss-ubx/unbind") == "")
        #expect(contents("drivers_probe") == "")
        for name in ["../../devices/platform", "serial0-0/../serial1-0", "", "..", "serial0-0\n"] {
            #expect(ControllerSerdevDevice.locate(port: name, sysfs: sysfs).failure == .badName(name), "\(name)")
        }
        #expect(ControllerSerdevDevice.locate(port: "serial7-0", sysfs: sysfs).failure == .noDevice(port: "serial7-0"))
    }

    @Test func aWriteThatFailsSaysWhichFile() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.removeItem(atPath: "\(root)/sys/bus/serial/drivers_probe")
        try FileManager.default.createDirectory(atPath: "\(root)/sys/bus/serial/drivers_probe", withIntermediateDirectories: false)
        let device = try ControllerSerdevDevice.locate(port: "serial0-0", sysfs: sysfs).get()
        let failure = try #require(device.rebind(sysfs: sysfs).failure)
        #expect(failure == .write(file: "\(sysfs)/bus/serial/drivers_probe", errno: EISDIR))
        #expect(failure.description.hasPrefix("writing \(sysfs)/bus/serial/drivers_probe failed: Is a directory"))
    }
}
