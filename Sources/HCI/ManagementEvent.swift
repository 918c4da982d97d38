/// An event from the kernel's Bluetooth management interface
/// (BlueZ's doc/mgmt-api.txt), the few Tether reads.
///
/// Wire format: a 6-byte header (opcode, controller index, parameter
/// length; all little-endian) and the parameters.
public enum ManagementEvent: Sendable, Equatable {
    /// Device Disconnected (0x000C): a link of controller `index` to
    /// `address` ended, for `reason` (0 unspecified, 1 connection timeout,
    /// 2 terminated locally, 3 terminated by the remote, 4 authentication
    /// failure, 5 suspend). Sent only to sockets bound with CAP_NET_ADMIN.
    case deviceDisconnected(index: UInt16, address: String, addressType: UInt8, reason: UInt8)
    /// Index Added (0x0004) and Index Removed (0x0005): a controller became
    /// usable by bluetoothd, or stopped being.
    case indexAdded(index: UInt16)
    case indexRemoved(index: UInt16)
    /// Anything else, by opcode.
    case other(opcode: UInt16, index: UInt16)

    public static let deviceDisconnectedOpcode: UInt16 = 0x000C
    public static let indexAddedOpcode: UInt16 = 0x0004
    public static let indexRemovedOpcode: UInt16 = 0x0005

    /// Parses one datagram; nil when it is shorter than its header says.
    public init?(datagram bytes: some Collection<UInt8>) {
        let bytes = Array(bytes)
        guard bytes.count >= 6 else { return nil }
        func word(_ at: Int) -> UInt16 { UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8 }
        let opcode = word(0)
        let index = word(2)
        let length = Int(word(4))
        guard bytes.count >= 6 + length else { return nil }
        let parameters = bytes[6..<6 + length]
        switch opcode {
        case Self.deviceDisconnectedOpcode:
            // Address (6, little-endian), Address_Type (1), Reason (1).
            guard length >= 8 else { return nil }
            let start = parameters.startIndex
            let address = parameters[start..<start + 6].reversed()
                .map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }
                .joined(separator: ":")
            self = .deviceDisconnected(
                index: index, address: address, addressType: parameters[start + 6], reason: parameters[start + 7]
            )
        case Self.indexAddedOpcode:
            self = .indexAdded(index: index)
        case Self.indexRemovedOpcode:
            self = .indexRemoved(index: index)
        default:
            self = .other(opcode: opcode, index: index)
        }
    }
}
