import Foundation
import HCI
import Testing
import TestSupport

/// What a controller is, read from a sysfs laid out as the kernel lays it
/// out for each kind of controller a gateway has.
@Suite struct ControllerTransportTests {
    /// `root/class/bluetooth/NAME/device` → `root/devices/DEVICE`, with the
    /// device's `driver` link when there is one.
    func sysfs(_ root: String, controller: String, device: String?, driver: String?) throws {
        let fm = FileManager.default
        let hci = "\(root)/devices/virtual/bluetooth/\(controller)"
        try fm.createDirectory(atPath: hci, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: "\(root)/class/bluetooth", withIntermediateDirectories: true)
        try fm.createSymbolicLink(atPath: "\(root)/class/bluetooth/\(controller)", withDestinationPath: hci)
        guard let device else { return }
        let devicePath = "\(root)/devices/\(device)"
        try fm.createDirectory(atPath: devicePath, withIntermediateDirectories: true)
        try fm.createSymbolicLink(atPath: "\(hci)/device", withDestinationPath: devicePath)
        if let driver {
            let driverPath = "\(root)/bus/any/drivers/\(driver)"
            try fm.createDirectory(atPath: driverPath, withIntermediateDirectories: true)
            try fm.createSymbolicLink(atPath: "\(devicePath)/driver", withDestinationPath: driverPath)
        }
    }

    func controller(_ bus: ControllerBus) -> KernelController {
        KernelController(name: "hci0", index: 0, up: true, settingUp: false, address: "B8:27:EB:12:34:56", bus: bus)
    }

    @Test(arguments: [
        (ControllerBus.usb, "pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0", "btusb", "USB (btusb on 1-1:1.0)"),
        // The Raspberry Pi's onboard radio under Raspberry Pi OS: a serdev device.
        (.uart, "platform/soc/fe201000.serial/serial0/serial0-0", "hci_uart_bcm", "UART (hci_uart_bcm on serial0-0)"),
        // hciattach or btattach: a line discipline on the tty, no driver link.
        (.uart, "platform/soc/fe201000.serial/tty/ttyAMA0", nil, "UART (hci_uart on ttyAMA0)"),
        (.sdio, "platform/mmc1/mmc1:0001/mmc1:0001:2", "btsdio", "SDIO (btsdio on mmc1:0001:2)"),
    ] as [(ControllerBus, String, String?, String)])
    func aControllerWithADeviceIsNamedByItsBusDriverAndPort(bus: ControllerBus, device: String, driver: String?, expected: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try sysfs(dir.path, controller: "hci0", device: device, driver: driver)
        let transport = ControllerTransport.read(controller(bus), sysfs: dir.path)
        #expect(transport.description == expected)
        #expect(transport.bus == bus)
        // Only the serdev device (a driver bound to a UART controller's device) was attached by the kernel.
        #expect(transport.attachedByKernel == (bus == .uart && driver != nil))
    }

    /// A controller on a pseudo-terminal (`btattach` on Bumble's pty, as in
    /// `make e2e`) has no device in sysfs, nor has a virtual one (vhci).
    @Test func aControllerWithoutADeviceIsNamedByItsBus() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try sysfs(dir.path, controller: "hci0", device: nil, driver: nil)
        #expect(ControllerTransport.read(controller(.uart), sysfs: dir.path).description == "UART (hci_uart)")
        #expect(!ControllerTransport.read(controller(.uart), sysfs: dir.path).attachedByKernel)
        #expect(ControllerTransport.read(controller(.virtual), sysfs: dir.path).description == "virtual")
    }

    /// lib/hci.h's bus numbers, the low nibble of `hci_dev_info.type` (its
    /// high bits hold the controller type: primary or AMP).
    @Test func theKernelsBusNumbersMapToBuses() {
        #expect(ControllerBus(kernelType: 0) == .virtual)
        #expect(ControllerBus(kernelType: 1) == .usb)
        #expect(ControllerBus(kernelType: 3) == .uart)
        #expect(ControllerBus(kernelType: 0x13) == .uart)
        #expect(ControllerBus(kernelType: 6) == .sdio)
        #expect(ControllerBus(kernelType: 10) == .virtio)
        #expect(ControllerBus(kernelType: 15) == .other)
    }
}
