/// Lowercase hex encoding for payloads (the readings log) and decoding of
/// hex text (the log's records, the config's `keepalive.write`); hand-rolled
/// because encoding sits on the readings' hot path.
public enum HexBytes {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends the lowercase hex form of `bytes` to `buffer` as UTF-8.
    public static func append<Bytes: Sequence<UInt8>>(_ bytes: Bytes, to buffer: inout [UInt8]) {
        for byte in bytes {
            buffer.append(digits[Int(byte >> 4)])
            buffer.append(digits[Int(byte & 0x0f)])
        }
    }

    public static func encode<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        var buffer: [UInt8] = []
        append(bytes, to: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    /// Decodes an even-length string of hex digits (either case); nil otherwise.
    public static func decode(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(of: utf8[index]), let low = value(of: utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func value(of digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
