import BlueZ

/// What moves the dongle's address without it being another device, and
/// how Tether follows. Pure: it returns what to do and what to say; the
/// caller stores, logs and publishes.
///
/// - **Pairing reveals the identity address.** A dongle that advertises a
///   resolvable private address (RPA) hands its identity address and its
///   IRK over when it bonds; bluetoothd then changes `Device1.Address` (and
///   `AddressType`) of the same object (bleak #1737), and from then on the
///   kernel resolves every new RPA to that identity. After a restart of
///   bluetoothd the object is made at the identity's path. The address the
///   dongle was known by (configured, or bound) is followed to the identity:
///   a binding is rewritten (it is Tether's), a configured address is
///   followed until Tether stops and the operator is told to change it (the
///   config is the operator's).
/// - **Nordic's DFU bootloader** advertises as `DfuTarg`, with the DFU
///   service (0xFE59), at the application's address with its last octet
///   plus one (nRF5 SDK `nrf_dfu_ble`: `addr[0] += 1`; DevZone 6900, 41562).
///   It is never connected to (someone else is updating the firmware, and it
///   serves no telemetry); it is said once, shown in status until the dongle
///   itself is seen again, and counts as the air being heard.
///
/// Invariants: `followed` is set only from an Address change of the object
/// Tether resolved as its dongle, while it was known by the old address;
/// `bootloader` is set only while the dongle itself is not seen.
struct DongleIdentity: Sendable, Equatable {
    /// The identity address the configured `dongle.address` moved to; nil
    /// while it has not.
    private(set) var followed: String?
    /// The address of the dongle's DFU bootloader while it advertises and
    /// the dongle does not.
    private(set) var bootloader: String?

    static let bootloaderName = "DfuTarg"
    /// Nordic's Secure DFU service, 0xFE59.
    static let dfuService = "0000fe59-0000-1000-8000-00805f9b34fb"

    /// What an Address change of the dongle's own object asks for.
    enum Move: Equatable {
        /// Rewrite the binding to the identity address.
        case rebind(to: String, notice: String)
        /// Follow the configured address for this run, and tell the operator.
        case followConfigured(warning: String)
    }

    /// The dongle's object (`device`, resolved under `knownAs`) now says
    /// `newAddress`. `configured`: the config's `dongle.address`; `bound`:
    /// the binding's.
    mutating func addressChanged(
        of device: Device, to newAddress: String, newType: String?, knownAs: String?, configured: String?, bound: String?
    ) -> Move? {
        let new = newAddress.uppercased()
        guard let knownAs, device.address == knownAs, new != knownAs, !new.isEmpty else { return nil }
        let kind = newType == "public" ? "public identity address" : "identity address"
        if let configured {
            followed = new == configured ? nil : new
            guard new != configured else { return nil }
            return .followConfigured(
                warning: "the dongle \(knownAs) now shows its \(kind) \(new) (BlueZ learnt it when they paired): Tether follows it until it stops, but dongle.address = \"\(configured)\" will not find it after a restart; set dongle.address = \"\(new)\""
            )
        }
        guard bound == knownAs else { return nil }
        return .rebind(
            to: new,
            notice: "the dongle \(knownAs) now shows its \(kind) \(new) (BlueZ learnt it when they paired): the binding follows it"
        )
    }

    /// The address of `address`'s DFU bootloader: its last octet plus one,
    /// wrapping as the bootloader's byte does.
    static func bootloaderAddress(of address: String) -> String? {
        var octets = address.uppercased().split(separator: ":", omittingEmptySubsequences: false)
        guard octets.count == 6, let last = octets.last, let value = UInt8(last, radix: 16) else { return nil }
        let next = String(value &+ 1, radix: 16, uppercase: true)
        octets[5] = Substring(next.count < 2 ? "0" + next : next)
        return octets.joined(separator: ":")
    }

    /// Whether `device` is the DFU bootloader of the dongle at `address`.
    static func isBootloader(_ device: Device, of address: String?) -> Bool {
        guard let address, let expected = bootloaderAddress(of: address), device.address == expected else { return false }
        return device.name == bootloaderName || device.alias == bootloaderName || device.uuids.contains(dfuService)
    }

    /// `device`, the dongle's bootloader, advertises: the line to log the
    /// first time in an episode.
    mutating func bootloaderSeen(_ device: Device, of address: String) -> String? {
        guard bootloader == nil else { return nil }
        bootloader = device.address
        return "the dongle \(address) is in its DFU bootloader (advertising as \(Self.bootloaderName) at \(device.address)): its firmware is being updated; Tether does not connect to the bootloader and waits for the dongle"
    }

    /// The dongle itself was seen (it advertised, or a link came up): the
    /// line to log if that ends a bootloader episode.
    mutating func dongleSeen(_ address: String) -> String? {
        guard let was = bootloader else { return nil }
        bootloader = nil
        return "the dongle \(address) is back from its DFU bootloader (\(was))"
    }

    /// A random address whose two top bits are 01: one that changes every
    /// few minutes and that only a bond lets BlueZ follow.
    static func isResolvablePrivate(_ device: Device) -> Bool {
        guard device.addressType == "random", let first = device.address.split(separator: ":").first,
              let value = UInt8(first, radix: 16)
        else { return false }
        return value & 0xC0 == 0x40
    }
}
