/// What a TOML bare key is made of: A–Z, a–z, 0–9, "_" and "-", nothing else.
/// Compared as ASCII: `isLetter` and `isNumber` would look each character up in
/// the standard library's Unicode tables, at every start, to then accept only
/// ASCII.
enum TOMLBareKey {
    static func allows(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    static func allows(_ character: Character) -> Bool {
        character.asciiValue.map(allows) ?? false
    }
}
