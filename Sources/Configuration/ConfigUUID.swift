/// GATT UUIDs used by the default configuration, and UUID normalisation so that
/// config values compare equal to what BlueZ reports (always full, lowercase).
public enum ConfigUUID {
    /// Nordic UART Service.
    public static let nusService = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"
    /// NUS RX: the central writes to the dongle here (our keep-alive target).
    public static let nusRX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
    /// NUS TX: the dongle notifies readings here.
    public static let nusTX = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

    /// The Bluetooth base UUID that 16- and 32-bit short UUIDs expand into.
    private static let baseSuffix = "-0000-1000-8000-00805f9b34fb"

    /// Returns the canonical lowercase 128-bit form of `text`, or nil if it is not a UUID.
    /// Accepts "2a19", "0x2a19" (16-bit), "0000180f"/"0x0000180f" (32-bit) and the
    /// full 8-4-4-4-12 form in any case.
    public static func normalize(_ text: String) -> String? {
        var value = text.trimmingASCIIWhitespace().lowercased()[...]
        if value.hasPrefix("0x") { value = value.dropFirst(2) }
        guard !value.isEmpty, value.allSatisfy({ $0 == "-" || $0.isHexDigit && $0.isASCII }) else { return nil }
        switch value.count {
        case 4 where !value.contains("-"):
            return "0000" + value + baseSuffix
        case 8 where !value.contains("-"):
            return value + baseSuffix
        case 36:
            let groups = value.split(separator: "-", omittingEmptySubsequences: false)
            guard groups.map(\.count) == [8, 4, 4, 4, 12] else { return nil }
            return String(value)
        default:
            return nil
        }
    }
}
