/// A dongle's payload as the operator declares it (the config's `[decode]`):
/// fields in order, each a name and a type, numbers optionally scaled. It
/// turns a payload into a JSON object of named values, which `tether
/// readings` and `tether forward` print beside the record's `hex` (never
/// instead of it).
///
/// Invariants: names are unique, non-empty and JSON-safe (letters, digits,
/// `_`; `_` alone is padding, decoded but not printed); a scale is finite
/// and non-zero, and only on numbers; `size` is the sum of the fields'.
/// A payload fits only if its length is exactly `size`: a shorter or longer
/// one (another firmware's) is left to its hex and counted by the caller.
public struct PayloadLayout: Sendable, Equatable {
    public struct Field: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case unsigned(bytes: Int, bigEndian: Bool)
            case signed(bytes: Int, bigEndian: Bool)
            case float(bytes: Int, bigEndian: Bool)
            /// Fixed-length bytes, printed as hex.
            case bytes(Int)

            public var size: Int {
                switch self {
                case .unsigned(let bytes, _), .signed(let bytes, _), .float(let bytes, _): bytes
                case .bytes(let count): count
                }
            }

            var isNumber: Bool { if case .bytes = self { false } else { true } }
        }

        public var name: String
        public var kind: Kind
        /// Multiplies the value (`temperature:i16le*0.01`); nil: as read.
        public var scale: Double?

        public init(name: String, kind: Kind, scale: Double? = nil) {
            self.name = name
            self.kind = kind
            self.scale = scale
        }

        /// Padding: decoded (it takes its bytes) but not printed.
        public var isPadding: Bool { name == "_" }
    }

    public var fields: [Field]
    /// The characteristic whose payloads this describes (lowercase UUID);
    /// nil: every characteristic's.
    public var characteristic: String?
    public let size: Int

    /// A payload is at most an ATT value: 512 bytes.
    public static let maximumSize = 512

    public init(fields: [Field], characteristic: String? = nil) throws(DeclarationError) {
        var names: Set<String> = []
        for field in fields where !field.isPadding {
            guard names.insert(field.name).inserted else { throw DeclarationError("the field name \(field.name) is used twice") }
        }
        guard fields.contains(where: { !$0.isPadding }) else { throw DeclarationError("declares no field (only padding)") }
        let size = fields.reduce(0) { $0 + $1.kind.size }
        guard size <= Self.maximumSize else {
            throw DeclarationError("declares \(size) bytes, more than a notification can hold (\(Self.maximumSize))")
        }
        self.fields = fields
        self.characteristic = characteristic
        self.size = size
    }

    public struct DeclarationError: Error, Equatable, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// The type names `Field.parse` accepts, for error messages and docs.
    public static let typeNames =
        "u8, i8, u16le, u16be, i16le, i16be, u32le, u32be, i32le, i32be, u64le, u64be, i64le, i64be, "
        + "f32le, f32be, f64le, f64be, bytesN (N fixed bytes, printed as hex)"

    /// The payload's fields as a JSON object's text (`{"temperature":21.5,…}`),
    /// or nil when the payload does not fit (its length is not `size`).
    public func json(_ payload: some Collection<UInt8>) -> String? {
        guard payload.count == size else { return nil }
        let bytes = Array(payload)
        var text = "{"
        var offset = 0
        var first = true
        for field in fields {
            let slice = bytes[offset..<offset + field.kind.size]
            offset += field.kind.size
            guard !field.isPadding else { continue }
            if !first { text += "," }
            first = false
            text += "\"" + field.name + "\":" + Self.value(slice, field)
        }
        return text + "}"
    }

    /// One field's JSON value.
    static func value(_ slice: ArraySlice<UInt8>, _ field: Field) -> String {
        switch field.kind {
        case .bytes:
            return "\"" + slice.map { hexDigits[Int($0 >> 4)] + hexDigits[Int($0 & 0x0f)] }.joined() + "\""
        case .unsigned(_, let bigEndian):
            let raw = Self.integer(slice, bigEndian: bigEndian)
            guard let scale = field.scale else { return String(raw) }
            return Self.number(Self.scaled(Double(raw), by: scale))
        case .signed(let size, let bigEndian):
            let raw = Self.integer(slice, bigEndian: bigEndian)
            // Sign-extend from the field's width.
            let shift = UInt64(64 - 8 * size)
            let value = Int64(bitPattern: raw << shift) >> Int64(shift)
            guard let scale = field.scale else { return String(value) }
            return Self.number(Self.scaled(Double(value), by: scale))
        case .float(let size, let bigEndian):
            let raw = Self.integer(slice, bigEndian: bigEndian)
            let value = size == 4 ? Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw))) : Double(bitPattern: raw)
            return Self.number(field.scale.map { Self.scaled(value, by: $0) } ?? value)
        }
    }

    private static let hexDigits = Array("0123456789abcdef").map(String.init)

    static func integer(_ slice: ArraySlice<UInt8>, bigEndian: Bool) -> UInt64 {
        var value: UInt64 = 0
        if bigEndian {
            for byte in slice { value = value << 8 | UInt64(byte) }
        } else {
            for byte in slice.reversed() { value = value << 8 | UInt64(byte) }
        }
        return value
    }

    /// `value × scale`; a scale that is 1/N for a whole N divides by N
    /// instead, so 2150 × 0.01 prints 21.5 and not 21.500000000000004.
    static func scaled(_ value: Double, by scale: Double) -> Double {
        if abs(scale) < 1 {
            let divisor = (1 / scale).rounded()
            if divisor != 0, abs(divisor * scale - 1) < 1e-12 { return value / divisor }
        }
        return value * scale
    }

    /// A JSON number; NaN and infinities (a float field's) are null.
    static func number(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}

extension PayloadLayout.Field {
    /// `name:type` or `name:type*scale`, as the config writes a field.
    public static func parse(_ text: String) throws(PayloadLayout.DeclarationError) -> Self {
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else {
            throw .init("\"\(text)\": expected name:type, such as \"temperature:i16le*0.01\"")
        }
        let name = String(parts[0])
        guard name == "_" || Self.isName(name) else {
            throw .init("\"\(text)\": a field name is letters, digits and _, starting with a letter or _ (\"_\" alone is padding)")
        }
        var typeText = Substring(parts[1])
        var scale: Double?
        if let star = typeText.firstIndex(of: "*") {
            let scaleText = typeText[typeText.index(after: star)...]
            guard let value = Double(scaleText), value.isFinite, value != 0 else {
                throw .init("\"\(text)\": the scale after * must be a non-zero number, such as 0.01")
            }
            scale = value
            typeText = typeText[..<star]
        }
        guard let kind = Self.kind(String(typeText)) else {
            throw .init("\"\(text)\": unknown type \"\(typeText)\" (known: \(PayloadLayout.typeNames))")
        }
        if scale != nil, !kind.isNumber { throw .init("\"\(text)\": a scale applies to numbers, not bytes") }
        return Self(name: name, kind: kind, scale: scale)
    }

    static func isName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 64 else { return false }
        func letter(_ c: Unicode.Scalar) -> Bool { ("a"..."z").contains(c) || ("A"..."Z").contains(c) || c == "_" }
        return letter(first) && name.unicodeScalars.allSatisfy { letter($0) || ("0"..."9").contains($0) }
    }

    static func kind(_ text: String) -> Kind? {
        switch text {
        case "u8": return .unsigned(bytes: 1, bigEndian: false)
        case "i8": return .signed(bytes: 1, bigEndian: false)
        default: break
        }
        if text.hasPrefix("bytes"), let count = Int(text.dropFirst(5)), count >= 1, count <= PayloadLayout.maximumSize {
            return .bytes(count)
        }
        guard text.count >= 5, let first = text.first else { return nil }
        let bigEndian: Bool
        switch text.suffix(2) {
        case "le": bigEndian = false
        case "be": bigEndian = true
        default: return nil
        }
        guard let bits = Int(text.dropFirst().dropLast(2)), [16, 32, 64].contains(bits) else { return nil }
        switch first {
        case "u": return .unsigned(bytes: bits / 8, bigEndian: bigEndian)
        case "i": return .signed(bytes: bits / 8, bigEndian: bigEndian)
        case "f" where bits != 16: return .float(bytes: bits / 8, bigEndian: bigEndian)
        default: return nil
        }
    }
}
