import Hex
import PayloadLayout

/// A record line with its payload's declared fields added: `,"fields":{…}`
/// before the closing brace, the rest of the line (`hex` above all) as
/// written. Works on the line's bytes, as the forwarder holds them, without
/// decoding the whole record.
public enum RecordFields {
    public enum Outcome: Equatable {
        /// The line with `fields` added.
        case decoded([UInt8])
        /// The payload does not fit the declaration (its length in bytes):
        /// the line is kept as it is, and the caller counts it.
        case undecodable(payloadBytes: Int)
        /// Not a reading the declaration covers (a gap record, another
        /// characteristic's payload, a line without hex).
        case notDescribed
    }

    public static func annotate(_ line: some Collection<UInt8>, with layout: PayloadLayout) -> Outcome {
        let bytes = Array(line)
        guard let hexRange = value(of: #""hex":""#, in: bytes), bytes.last == UInt8(ascii: "}") else { return .notDescribed }
        if let characteristic = layout.characteristic {
            guard let range = value(of: #""char":""#, in: bytes),
                  String(decoding: bytes[range], as: UTF8.self).lowercased() == characteristic
            else { return .notDescribed }
        }
        guard let payload = HexBytes.decode(String(decoding: bytes[hexRange], as: UTF8.self)) else { return .notDescribed }
        guard let fields = layout.json(payload) else { return .undecodable(payloadBytes: payload.count) }
        var annotated = bytes
        annotated.removeLast()
        annotated += Array(#","fields":"#.utf8)
        annotated += Array(fields.utf8)
        annotated.append(UInt8(ascii: "}"))
        return .decoded(annotated)
    }

    /// The bytes of a string value that follows `key` (`"hex":"`), up to its
    /// closing quote (hex and UUIDs hold no escapes).
    static func value(of key: String, in line: [UInt8]) -> Range<Int>? {
        let key = Array(key.utf8)
        guard line.count > key.count else { return nil }
        var index = 0
        while index + key.count <= line.count {
            if line[index] == key[0], line[index..<index + key.count].elementsEqual(key) {
                let start = index + key.count
                var end = start
                while end < line.count, line[end] != UInt8(ascii: "\"") { end += 1 }
                return end < line.count ? start..<end : nil
            }
            index += 1
        }
        return nil
    }
}
