/// The text of one sd_notify datagram: `KEY=VALUE` lines.
enum NotifyMessage {
    /// Encodes `assignments`, or names the first key the protocol cannot
    /// carry. Line breaks in values become spaces: the protocol is line
    /// based, so a status text holding "\nREADY=1" (say, an error's
    /// description) would otherwise forge an assignment never meant.
    static func encode(_ assignments: [(String, String)]) -> Result<[UInt8], InvalidKey> {
        var bytes: [UInt8] = []
        for (key, value) in assignments {
            guard isValidKey(key) else { return .failure(InvalidKey(key: key)) }
            bytes += key.utf8
            bytes.append(UInt8(ascii: "="))
            bytes += value.utf8.map { isLineBreak($0) ? UInt8(ascii: " ") : $0 }
            bytes.append(UInt8(ascii: "\n"))
        }
        return .success(bytes)
    }

    /// A key is everything before the first `=` on its line, so it can hold
    /// neither `=` nor a line break, and must not be empty. Checked on bytes:
    /// as Characters, "\r\n" is one grapheme and would hide its "\n".
    static func isValidKey(_ key: String) -> Bool {
        !key.isEmpty && !key.utf8.contains { $0 == UInt8(ascii: "=") || isLineBreak($0) }
    }

    private static func isLineBreak(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }

    struct InvalidKey: Error {
        let key: String
    }
}
