/// Normalises Bluetooth device addresses to BlueZ's spelling ("AA:BB:CC:DD:EE:FF"),
/// so a configured address compares equal to the `Address` property BlueZ reports.
public enum BluetoothAddressText {
    /// Returns the uppercase colon-separated form, or nil unless `text` is six
    /// two-digit hex groups separated by ":" (or "-", as some tools print them).
    public static func normalize(_ text: String) -> String? {
        let trimmed = text.trimmingASCIIWhitespace()
        let separator: Character = trimmed.contains("-") ? "-" : ":"
        let groups = trimmed.split(separator: separator, omittingEmptySubsequences: false)
        guard groups.count == 6,
              groups.allSatisfy({ $0.count == 2 && $0.allSatisfy { $0.isASCII && $0.isHexDigit } })
        else { return nil }
        return groups.map { $0.uppercased() }.joined(separator: ":")
    }
}
