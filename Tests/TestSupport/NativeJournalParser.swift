/// Reads journald's native protocol back, the way journald does, so tests
/// check what the handler put on the wire rather than how it built it.
public struct ParsedJournalEntry {
    public struct Field: Equatable {
        public var name: String
        public var value: [UInt8]
        /// Whether the field came in the length-prefixed form.
        public var isBinary: Bool
        public var text: String { String(decoding: value, as: UTF8.self) }

        public init(name: String, value: [UInt8], isBinary: Bool) {
            self.name = name
            self.value = value
            self.isBinary = isBinary
        }
    }

    public struct Malformed: Error, CustomStringConvertible {
        public var description: String
    }

    public var fields: [Field] = []

    public init(_ bytes: [UInt8]) throws {
        var index = 0
        while index < bytes.count {
            guard let end = bytes[index...].firstIndex(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "\n") })
            else { throw Malformed(description: "field name at \(index) has no end") }
            let name = String(decoding: bytes[index..<end], as: UTF8.self)
            guard !name.isEmpty else { throw Malformed(description: "empty field name at \(index)") }
            if bytes[end] == UInt8(ascii: "=") {
                guard let newline = bytes[(end + 1)...].firstIndex(of: UInt8(ascii: "\n"))
                else { throw Malformed(description: "value of \(name) has no newline") }
                fields.append(Field(name: name, value: Array(bytes[(end + 1)..<newline]), isBinary: false))
                index = newline + 1
            } else {
                let lengthStart = end + 1
                guard lengthStart + 8 <= bytes.count else { throw Malformed(description: "\(name): short length") }
                var length: UInt64 = 0
                for (shift, byte) in bytes[lengthStart..<(lengthStart + 8)].enumerated() {
                    length |= UInt64(byte) << (8 * UInt64(shift))
                }
                let valueStart = lengthStart + 8
                guard length < UInt64(bytes.count - valueStart),  // room for the value and its newline
                      bytes[valueStart + Int(length)] == UInt8(ascii: "\n")
                else { throw Malformed(description: "\(name): value of length \(length) does not fit or end") }
                let valueEnd = valueStart + Int(length)
                fields.append(Field(name: name, value: Array(bytes[valueStart..<valueEnd]), isBinary: true))
                index = valueEnd + 1
            }
        }
    }

    /// The first value of `name`, as text.
    public subscript(name: String) -> String? {
        fields.first { $0.name == name }?.text
    }

    public func field(_ name: String) -> Field? {
        fields.first { $0.name == name }
    }

    public func values(_ name: String) -> [String] {
        fields.filter { $0.name == name }.map(\.text)
    }
}
