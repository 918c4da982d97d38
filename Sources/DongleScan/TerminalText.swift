/// Text from a peer (a nearby advertiser's device name), made safe to print
/// on an operator's terminal: nothing in it can move the cursor, recolour,
/// retitle or clear the screen, or reorder what follows.
///
/// Escaped: C0 controls and DEL as `\xNN` (ESC, the start of every terminal
/// escape sequence, is `\x1B`; a newline `\x0A`, so the text stays on its
/// line), C1 controls (U+0080–U+009F: CSI alone is U+009B) and the Unicode
/// bidirectional controls (the embeddings and overrides U+202A–U+202E, the
/// isolates U+2066–U+2069, the marks U+200E, U+200F and U+061C), and the
/// line and paragraph separators U+2028, U+2029, as `\u{NNNN}`; a backslash
/// as `\\`, so that an escape in the output is always one of these. All
/// other Unicode (accents, CJK, emoji) is kept as it is.
public enum TerminalText {
    public static func escaped(_ text: some StringProtocol) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return String(text) }
        var result = ""
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if value < 0x20 || value == 0x7F {
                let hex = String(value, radix: 16, uppercase: true)
                result += "\\x" + (hex.count < 2 ? "0" : "") + hex
            } else if scalar == "\\" {
                result += "\\\\"
            } else if needsEscape(scalar) {
                let hex = String(value, radix: 16, uppercase: true)
                result += "\\u{" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x5C: true  // C0, DEL, C1, backslash
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true  // bidi controls
        case 0x2028, 0x2029: true  // line and paragraph separators
        default: false
        }
    }
}
