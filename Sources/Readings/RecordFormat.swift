import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Hex

/// Formats log lines by hand, straight into a byte buffer: this runs for every
/// reading, and the fixed key order keeps the files greppable and diffable.
///
/// `{"ts":"2026-11-21T13:45:12.345Z","seq":1234,"device":"AA:BB:CC:DD:EE:FF","char":"6e40…","source":"notify","hex":"0a0b0c","v":2,"boot_id":"…","boot_ms":123456,"clock_synced":true}`
///
/// The fields, their types and meaning, and the rule for adding fields are
/// in `packaging/reading.schema.json` (installed as
/// /usr/share/tether/reading.schema.json). Fields are only ever added, at
/// the end of the line, and `v` goes up when they are; the prefix up to
/// `seq` is fixed (`ReadingLogReader` finds records by it).
enum RecordFormat {
    static let gapSource = "gap"
    /// Version 1: no `v` field, `ts` alone; 2: `v`, `boot_id`, `boot_ms`, `clock_synced`.
    static let version: UInt64 = 2

    static func appendReading(_ reading: Reading, seq: UInt64, to buffer: inout [UInt8]) {
        appendPrefix(at: reading.receivedAt, seq: seq, device: reading.device, to: &buffer)
        append(#","char":"#, to: &buffer)
        appendJSONString(reading.characteristic, to: &buffer)
        append(#","source":""#, to: &buffer)
        append(reading.source.rawValue, to: &buffer)
        append(#"","hex":""#, to: &buffer)
        HexBytes.append(reading.payload, to: &buffer)
        append("\"", to: &buffer)
        appendVersion(boot: reading.boot, to: &buffer)
        append("}\n", to: &buffer)
    }

    /// `,"v":2` and, when known, the boot's stamp.
    private static func appendVersion(boot: BootStamp?, to buffer: inout [UInt8]) {
        append(#","v":"#, to: &buffer)
        appendDecimal(version, to: &buffer)
        guard let boot else { return }
        append(#","boot_id":"#, to: &buffer)
        appendJSONString(boot.bootID, to: &buffer)
        append(#","boot_ms":"#, to: &buffer)
        appendDecimal(UInt64(clamping: max(0, boot.sinceBootMilliseconds)), to: &buffer)
        #if DST_BUG_SYNC_FLAG_LOST  // planted bug (make dst-selftest): every record claims a synchronised clock
        append(#","clock_synced":true"#, to: &buffer)
        #else
        switch boot.clockSynchronised {
        case true?: append(#","clock_synced":true"#, to: &buffer)
        case false?: append(#","clock_synced":false"#, to: &buffer)
        case nil: break
        }
        #endif
    }

    static func appendGap(count: Int, device: String, at date: Date, seq: UInt64, to buffer: inout [UInt8]) {
        appendPrefix(at: date, seq: seq, device: device, to: &buffer)
        append(#","source":"gap","count":"#, to: &buffer)
        append(String(count), to: &buffer)
        appendVersion(boot: nil, to: &buffer)
        append("}\n", to: &buffer)
    }

    private static func appendPrefix(at date: Date, seq: UInt64, device: String, to buffer: inout [UInt8]) {
        append(#"{"ts":""#, to: &buffer)
        UTCTimestamp.append(date, to: &buffer)
        append(#"","seq":"#, to: &buffer)
        appendDecimal(seq, to: &buffer)
        append(#","device":"#, to: &buffer)
        appendJSONString(device, to: &buffer)
    }

    /// `value` in decimal, without a String in between (this runs per reading).
    static func appendDecimal(_ value: UInt64, to buffer: inout [UInt8]) {
        var divisor: UInt64 = 1
        while divisor <= value / 10 { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            buffer.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
    }

    private static func append(_ text: String, to buffer: inout [UInt8]) {
        buffer.append(contentsOf: text.utf8)
    }

    /// Appends `text` as a quoted JSON string. Swift strings are valid UTF-8, so
    /// only quotes, backslashes and control characters need escaping.
    static func appendJSONString(_ text: String, to buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): append(#"\""#, to: &buffer)
            case UInt8(ascii: "\\"): append(#"\\"#, to: &buffer)
            case UInt8(ascii: "\n"): append(#"\n"#, to: &buffer)
            case UInt8(ascii: "\r"): append(#"\r"#, to: &buffer)
            case UInt8(ascii: "\t"): append(#"\t"#, to: &buffer)
            case 0..<0x20, 0x7f:
                append(#"\u00"#, to: &buffer)
                HexBytes.append(CollectionOfOne(byte), to: &buffer)
            default: buffer.append(byte)
            }
        }
        buffer.append(UInt8(ascii: "\""))
    }
}
