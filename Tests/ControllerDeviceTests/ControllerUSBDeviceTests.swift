import FoundationEssentials
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@testable import ControllerDevice

/// A sysfs tree in a temporary directory, shaped like the kernel's for a
/// btusb controller on dummy_hcd (as `make e2e`'s guest has it) and for a
/// virtual one.
@Suite struct ControllerUSBDeviceTests {
    let root: String

    init() throws {
        root = try TemporaryDirectory("tether-usb").path
        let device = "\(root)/sys/devices/platform/dummy_hcd.0/usb1/1-1"
        let interface = "\(device)/1-1:1.0"
        try make(directory: "\(interface)/bluetooth/hci1")
        try make(directory: "\(root)/sys/bus/usb/drivers/btusb")
        try make(directory: "\(root)/sys/bus/usb")
        try make(directory: "\(root)/sys/class/bluetooth")
        try make(directory: "\(root)/sys/devices/virtual/bluetooth/hci0")
        try write("1\n", to: "\(device)/busnum")
        try write("3\n", to: "\(device)/devnum")
        try write("", to: "\(root)/sys/bus/usb/drivers/btusb/bind")
        try write("", to: "\(root)/sys/bus/usb/drivers/btusb/unbind")
        try link("\(root)/sys/bus/usb", at: "\(interface)/subsystem")
        try link("\(root)/sys/bus/usb/drivers/btusb", at: "\(interface)/driver")
        try link(interface, at: "\(interface)/bluetooth/hci1/device")
        try link("\(interface)/bluetooth/hci1", at: "\(root)/sys/class/bluetooth/hci1")
        try link("\(root)/sys/devices/virtual/bluetooth/hci0", at: "\(root)/sys/class/bluetooth/hci0")
    }

    func make(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func write(_ text: String, to path: String) throws {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
    }

    func link(_ target: String, at path: String) throws {
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    func contents(_ path: String) -> String {
        (FileManager.default.contents(atPath: path)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    @Test func findsTheUSBDeviceNodeAndInterfaceOfAController() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try ControllerUSBDevice.locate(controller: "hci1", sysfs: "\(root)/sys", dev: "/dev").get()
        #expect(device.interface == "1-1:1.0")
        #expect(device.node == "/dev/bus/usb/001/003")
        #expect(device.driver == "btusb")
        #expect(device.devicePath.hasSuffix("/usb1/1-1"))
    }

    @Test func aVirtualControllerOrAMissingOneIsNamedAsSuch() {
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(ControllerUSBDevice.locate(controller: "hci0", sysfs: "\(root)/sys").failure?.description.contains("is not a USB controller") == true)
        #expect(ControllerUSBDevice.locate(controller: "hci7", sysfs: "\(root)/sys").failure == .noController("hci7"))
    }

    @Test func rebindWritesTheInterfaceToUnbindThenBind() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try ControllerUSBDevice.locate(controller: "hci1", sysfs: "\(root)/sys").get()
        try device.rebind(sysfs: "\(root)/sys").get()
        #expect(contents("\(root)/sys/bus/usb/drivers/btusb/unbind") == "1-1:1.0")
        #expect(contents("\(root)/sys/bus/usb/drivers/btusb/bind") == "1-1:1.0")
    }

    @Test func aResetOfANodeThatIsNotThereSaysWhich() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try ControllerUSBDevice.locate(controller: "hci1", sysfs: "\(root)/sys", dev: "\(root)/dev").get()
        let failure = device.reset().failure
        #expect(failure == .reset(node: "\(root)/dev/bus/usb/001/003", errno: ENOENT))
    }
}

extension Result {
    var failure: Failure? { if case .failure(let failure) = self { failure } else { nil } }
}
