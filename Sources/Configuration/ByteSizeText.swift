/// Converts between byte counts and the text form used in the config file
/// ("64MiB", "1GiB", "512KiB", "10MB", "4096", "4096B").
///
/// Binary units (KiB, MiB, GiB, TiB) are powers of 1024, SI units (kB, MB, GB, TB)
/// powers of 1000. Units are matched case-insensitively: a size in bits makes no
/// sense here, so "mb" can only mean megabytes.
public enum ByteSizeText {
    private static let units: [(suffix: String, bytes: Int64)] = [
        ("b", 1),
        ("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("tib", 1 << 40),
        ("kb", 1_000), ("mb", 1_000_000), ("gb", 1_000_000_000), ("tb", 1_000_000_000_000),
    ]

    /// Parses a non-negative size; decimals are allowed ("1.5GiB") and rounded down
    /// to whole bytes. Returns nil for negative, malformed or overflowing input.
    public static func parse(_ text: String) -> Int64? {
        let trimmed = Substring(text.trimmingASCIIWhitespace())
        guard let (number, rest) = DecimalText.scan(trimmed) else { return nil }
        let unitText = rest.drop(while: { $0 == " " }).lowercased()
        if unitText.isEmpty { return number.scaled(by: 1) }
        guard let unit = units.first(where: { $0.suffix == unitText }) else { return nil }
        return number.scaled(by: unit.bytes)
    }

    /// Formats a size in the largest unit that represents it exactly, preferring
    /// binary units ("64MiB"), then SI units ("10MB"), else plain bytes ("4097B").
    public static func format(_ bytes: Int64) -> String {
        guard bytes > 0 else { return "\(bytes)B" }
        let binary: [(String, Int64)] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        let decimal: [(String, Int64)] = [("TB", 1_000_000_000_000), ("GB", 1_000_000_000), ("MB", 1_000_000), ("kB", 1_000)]
        for (suffix, size) in binary + decimal where bytes % size == 0 {
            return "\(bytes / size)\(suffix)"
        }
        return "\(bytes)B"
    }
}
