/// One record of `/dev/rfkill` (`struct rfkill_event` of
/// `include/uapi/linux/rfkill.h`, its first 8 bytes: newer kernels append
/// fields a reader that asks for 8 bytes never sees).
public struct RfkillEvent: Sendable, Equatable {
    public enum Operation: UInt8, Sendable {
        case add = 0
        case delete = 1
        case change = 2
        case changeAll = 3
    }

    /// The switch: `/sys/class/rfkill/rfkill<index>`.
    public var index: UInt32
    /// `RFKILL_TYPE_*`; 2 is Bluetooth.
    public var type: UInt8
    public var operation: Operation
    public var softBlocked: Bool
    public var hardBlocked: Bool

    public static let size = 8
    public static let bluetoothType: UInt8 = 2

    public init(index: UInt32, type: UInt8, operation: Operation, softBlocked: Bool, hardBlocked: Bool) {
        self.index = index
        self.type = type
        self.operation = operation
        self.softBlocked = softBlocked
        self.hardBlocked = hardBlocked
    }

    /// Decodes a record; nil if it is short or its operation unknown.
    public init?(bytes: some Collection<UInt8>) {
        let b = Array(bytes.prefix(Self.size))
        guard b.count == Self.size, let operation = Operation(rawValue: b[5]) else { return nil }
        // The index is in the host's byte order, like every field the kernel copies out.
        let index = UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24
        self.init(
            index: UInt32(littleEndian: index), type: b[4], operation: operation,
            softBlocked: b[6] != 0, hardBlocked: b[7] != 0
        )
    }

    /// The record as the kernel reads it (a write of `RFKILL_OP_CHANGE`
    /// sets the soft block of switch `index`; the other fields are ignored).
    public var bytes: [UInt8] {
        let index = self.index.littleEndian
        return [
            UInt8(truncatingIfNeeded: index), UInt8(truncatingIfNeeded: index >> 8),
            UInt8(truncatingIfNeeded: index >> 16), UInt8(truncatingIfNeeded: index >> 24),
            type, operation.rawValue, softBlocked ? 1 : 0, hardBlocked ? 1 : 0,
        ]
    }
}
