import DongleScan
import Testing

/// `tether scan` prints what nearby advertisers say their name is: no
/// control character or escape sequence of theirs reaches the terminal.
@Suite struct ScanOutputTests {
    @Test func controlAndBidiCharactersAreEscapedAndOtherUnicodeKept() {
        #expect(TerminalText.escaped("Tether-17") == "Tether-17")
        #expect(TerminalText.escaped("Capteur Température ☀️ 温度") == "Capteur Température ☀️ 温度")
        #expect(TerminalText.escaped("a\u{1B}]0;pwned\u{07}b") == #"a\x1B]0;pwned\x07b"#)
        #expect(TerminalText.escaped("x\u{1B}[2J\r\ny\t\u{0}\u{7F}") == #"x\x1B[2J\x0D\x0Ay\x09\x00\x7F"#)
        #expect(TerminalText.escaped("\u{9B}31m\u{85}") == #"\u{009B}31m\u{0085}"#, "C1: CSI and NEL")
        #expect(TerminalText.escaped("abc\u{202E}fdp.exe") == #"abc\u{202E}fdp.exe"#)
        #expect(TerminalText.escaped("\u{202A}\u{202B}\u{202C}\u{202D}\u{2066}\u{2067}\u{2068}\u{2069}")
            == #"\u{202A}\u{202B}\u{202C}\u{202D}\u{2066}\u{2067}\u{2068}\u{2069}"#)
        #expect(TerminalText.escaped(#"a\x1B"#) == #"a\\x1B"#, "a backslash is doubled: an escape shown is always ours")
    }

    static let hostile = ScanResult(
        address: "AA:BB:CC:DD:EE:FF", name: "\u{1B}[31mEvil\u{9B}2J\u{202E}x", rssi: -61, matches: [.nus, .nordic]
    )

    static func isSafe(_ text: String) -> Bool {
        !text.unicodeScalars.contains { scalar in
            let value = scalar.value
            return (value < 0x20 && value != 0x0A) || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value)
                || (0x2066...0x2069).contains(value)
        }
    }

    @Test func theTableAndTheProgressLineEscapeTheName() {
        let table = ScanResult.table([Self.hostile, ScanResult(address: "11:22:33:44:55:66", name: "Tether-17", rssi: nil, matches: [.name])])
        #expect(Self.isSafe(table), "\(table.debugDescription)")
        let lines = table.split(separator: "\n")
        #expect(lines.count == 3, "one line per device: \(table.debugDescription)")
        #expect(lines[1].hasPrefix(#"AA:BB:CC:DD:EE:FF  -61   \x1B[31mEvil\u{009B}"#), "\(lines[1])")
        #expect(lines[2] == "11:22:33:44:55:66  ?     Tether-17             name")
        let found = Self.hostile.foundLine(after: "1s")
        #expect(Self.isSafe(found), "\(found.debugDescription)")
        #expect(found == #"  +1s found AA:BB:CC:DD:EE:FF \x1B[31mEvil\u{009B}2J\u{202E}x -61 dBm"#)
        let newline = ScanResult(address: "AA:BB:CC:DD:EE:FF", name: "two\nlines", rssi: -70, matches: [.nus])
        #expect(!newline.foundLine(after: "1s").contains("\n") && !ScanResult.table([newline]).split(separator: "\n")[1].contains("lines\n"))
        #expect(ScanResult.table([newline]).split(separator: "\n").count == 2)
    }
}
