import CBluetooth
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The controllers the kernel has, whether or not bluetoothd uses them:
/// `/sys/class/bluetooth/hciN` and each one's flags (HCIGETDEVINFO).
///
/// Linux announces a controller to the management interface, and so to
/// bluetoothd, only after its initialisation succeeded; one whose HCI Reset
/// timed out at set-up (`hci0: Opcode 0x0c03 failed: -110`) stays in sysfs,
/// down, and bluetoothd never lists it.
public struct KernelController: Sendable, Equatable {
    public var name: String
    public var index: Int
    /// HCI_UP: initialised and open (also a controller held through an HCI
    /// user channel, which bluetoothd does not list either).
    public var up: Bool
    /// HCI_INIT or HCI_RUNNING: being set up now.
    public var settingUp: Bool
    /// As the kernel knows it; 00:00:00:00:00:00 before initialisation read it.
    public var address: String
    /// What the controller is attached by.
    public var bus: ControllerBus

    public init(name: String, index: Int, up: Bool, settingUp: Bool, address: String, bus: ControllerBus = .usb) {
        self.name = name
        self.index = index
        self.up = up
        self.settingUp = settingUp
        self.address = address
        self.bus = bus
    }

    /// Neither up nor being set up: a controller the kernel gave up on, or
    /// one taken down by hand (which bluetoothd would still list).
    public var down: Bool { !up && !settingUp }

    /// HCIGETDEVINFO's flag bits (lib/hci.h: HCI_UP, HCI_INIT, HCI_RUNNING).
    static let upFlag: UInt32 = 1 << 0
    static let initFlag: UInt32 = 1 << 1
    static let runningFlag: UInt32 = 1 << 2
}

public enum KernelControllers {
    /// Every `hciN` under `sysfs` (connections, `hciN:M`, left out) with its
    /// flags; controllers whose flags cannot be read are left out.
    public static func list(sysfs: String = "/sys/class/bluetooth") -> [KernelController] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: sysfs)) ?? []
        return names.compactMap(controller(named:)).sorted { $0.index < $1.index }
    }

    /// One controller, like `hci0`; nil when the kernel has none by that name.
    public static func controller(named name: String) -> KernelController? {
        guard name.hasPrefix("hci"), let index = Int(name.dropFirst(3)) else { return nil }
        var flags: UInt32 = 0
        var type: UInt8 = 0
        var bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0)
        let result = withUnsafeMutableBytes(of: &bytes) { raw in
            tether_hci_device_info(Int32(index), &flags, raw.bindMemory(to: UInt8.self).baseAddress, &type)
        }
        guard result == 0 else { return nil }
        let address = [bytes.5, bytes.4, bytes.3, bytes.2, bytes.1, bytes.0]
            .map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }.joined(separator: ":")
        return KernelController(
            name: name, index: index, up: flags & KernelController.upFlag != 0,
            settingUp: flags & (KernelController.initFlag | KernelController.runningFlag) != 0, address: address,
            bus: ControllerBus(kernelType: type)
        )
    }
}
