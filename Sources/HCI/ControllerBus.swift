/// What a controller is attached by, as the kernel records it (the low
/// nibble of `hci_dev_info.type`, which `hciconfig` prints as "Bus:").
///
/// It decides which recovery steps can reach a controller: a USB reset
/// needs a USB device, and the Raspberry Pi's onboard radio is on a UART
/// (`hci_uart`), attached by a line discipline or a serdev driver.
public enum ControllerBus: String, Sendable, Equatable, CaseIterable {
    case virtual
    case usb
    case pcCard = "pc-card"
    case uart
    case rs232
    case pci
    case sdio
    case spi
    case i2c
    case smd
    case virtio
    /// A bus number this list does not know (a newer kernel's).
    case other

    /// From `hci_dev_info.type` (lib/hci.h: HCI_VIRTUAL 0 … HCI_VIRTIO 10).
    public init(kernelType: UInt8) {
        let all: [ControllerBus] = [.virtual, .usb, .pcCard, .uart, .rs232, .pci, .sdio, .spi, .i2c, .smd, .virtio]
        let bus = Int(kernelType & 0x0F)
        self = bus < all.count ? all[bus] : .other
    }

    /// As an operator reads it: "USB", "UART", "virtual".
    public var displayName: String {
        switch self {
        case .virtual: "virtual"
        case .usb: "USB"
        case .pcCard: "PC Card"
        case .uart: "UART"
        case .rs232: "RS-232"
        case .pci: "PCI"
        case .sdio: "SDIO"
        case .spi: "SPI"
        case .i2c: "I2C"
        case .smd: "SMD"
        case .virtio: "virtio"
        case .other: "unknown bus"
        }
    }
}
