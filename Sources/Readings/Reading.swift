import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One value received from the dongle, as handed to the recorder.
public struct Reading: Sendable, Equatable {
    public enum Source: String, Sendable {
        /// Delivered by a GATT notification.
        case notify
        /// Returned by a GATT read (e.g. read-mode keep-alive polling).
        case read
    }

    /// Wall-clock arrival time; logged with millisecond precision in UTC.
    public var receivedAt: Date
    /// Device address, "AA:BB:CC:DD:EE:FF".
    public var device: String
    /// Characteristic UUID, lowercase 128-bit.
    public var characteristic: String
    public var source: Source
    public var payload: [UInt8]
    /// The boot, the time since it and the clock's synchronisation when the
    /// reading arrived (taken with `receivedAt`); nil: not known.
    public var boot: BootStamp?

    public init(
        receivedAt: Date = Date(), device: String, characteristic: String, source: Source = .notify, payload: [UInt8],
        boot: BootStamp? = nil
    ) {
        self.receivedAt = receivedAt
        self.device = device
        self.characteristic = characteristic
        self.source = source
        self.payload = payload
        self.boot = boot
    }
}
