/// One journal entry and its encoding in journald's native protocol
/// (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/). Pure, so the wire format
/// is tested without a socket.
public struct JournalEntry: Sendable, Hashable {
    /// In the order they are sent; a name may repeat.
    public private(set) var fields: [JournalField] = []

    public init(fields: [JournalField] = []) {
        self.fields = fields
    }

    public mutating func append(_ name: JournalFieldName, _ value: String) {
        fields.append(JournalField(name: name, value: value))
    }

    /// The first value of `name`, as text (mostly for tests and fallbacks).
    public func value(of name: JournalFieldName) -> String? {
        fields.first { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
    }

    /// The datagram payload. A value holding a newline cannot use the
    /// `NAME=value\n` form, whose newline ends the value, so it goes as
    /// `NAME\n`, its length as a little-endian UInt64, the bytes, and `\n`.
    public func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fields.reduce(0) { $0 + $1.name.rawValue.utf8.count + $1.value.count + 10 })
        for field in fields {
            bytes += field.name.rawValue.utf8
            if field.value.contains(UInt8(ascii: "\n")) {
                bytes.append(UInt8(ascii: "\n"))
                withUnsafeBytes(of: UInt64(field.value.count).littleEndian) { bytes += $0 }
            } else {
                bytes.append(UInt8(ascii: "="))
            }
            bytes += field.value
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}
