/// Names of readings files: `readings-<first seq, 20 digits>.jsonl`. Zero-padding
/// to UInt64's full width makes lexical order equal chronological order.
enum LogFileName {
    static let prefix = "readings-"
    static let suffix = ".jsonl"
    private static let digits = 20

    static func name(firstSeq: UInt64) -> String {
        let number = String(firstSeq)
        return prefix + String(repeating: "0", count: digits - number.count) + number + suffix
    }

    /// The first seq encoded in `name`, or nil if `name` is not one of our files
    /// (anything else in the directory is left alone).
    static func firstSeq(of name: String) -> UInt64? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return nil }
        let number = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard number.utf8.count == digits, number.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return UInt64(number)
    }
}
