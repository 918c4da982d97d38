import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Hex

/// One line of a readings file, decoded. Reading records carry `char` and `hex`;
/// gap records (`source == "gap"`) carry `count` instead.
public struct ReadingRecord: Sendable, Equatable, Decodable {
    public var ts: String
    public var seq: UInt64
    public var device: String
    public var char: String?
    public var source: String
    public var hex: String?
    public var count: Int?
    /// `v`: the record's version; nil (absent) is 1.
    public var version: UInt64?
    /// `boot_id`, `boot_ms`, `clock_synced` (`BootStamp`); nil in version 1.
    public var bootID: String?
    public var bootMilliseconds: UInt64?
    public var clockSynchronised: Bool?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case ts, seq, device, char, source, hex, count
        case version = "v"
        case bootID = "boot_id"
        case bootMilliseconds = "boot_ms"
        case clockSynchronised = "clock_synced"
    }

    public init(
        ts: String, seq: UInt64, device: String, char: String? = nil, source: String, hex: String? = nil, count: Int? = nil,
        version: UInt64? = nil, bootID: String? = nil, bootMilliseconds: UInt64? = nil, clockSynchronised: Bool? = nil
    ) {
        self.ts = ts
        self.seq = seq
        self.device = device
        self.char = char
        self.source = source
        self.hex = hex
        self.count = count
        self.version = version
        self.bootID = bootID
        self.bootMilliseconds = bootMilliseconds
        self.clockSynchronised = clockSynchronised
    }

    /// The payload bytes decoded from `hex`; nil for gap records or malformed hex.
    public var payload: [UInt8]? {
        hex.flatMap(HexBytes.decode)
    }

    /// Whether this is a record we could have written: recovery treats anything
    /// else (valid JSON included) as the torn end of the file.
    var isWellFormed: Bool {
        guard seq >= 1, ts.utf8.count == 24, ts.hasSuffix("Z") else { return false }
        switch source {
        case Reading.Source.notify.rawValue, Reading.Source.read.rawValue:
            return char != nil && payload != nil && count == nil
        case RecordFormat.gapSource:
            return (count ?? -1) >= 0 && char == nil && hex == nil
        default:
            return false
        }
    }

    /// Decodes one line (without its newline); nil unless it is a well-formed record.
    public static func decode(line: some Collection<UInt8>, using decoder: JSONDecoder) -> ReadingRecord? {
        guard let record = try? decoder.decode(ReadingRecord.self, from: Data(line)), record.isWellFormed else { return nil }
        return record
    }
}
