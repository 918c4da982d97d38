import Systemd
import Testing

@Suite struct JournalFieldNameTests {
    @Test(arguments: [
        ("event", "TETHER_EVENT"), ("device", "TETHER_DEVICE"), ("state", "TETHER_STATE"),
        ("attempt", "TETHER_ATTEMPT"), ("error", "TETHER_ERROR"), ("device-id", "TETHER_DEVICE_ID"),
        ("Device.ID", "TETHER_DEVICE_ID"), ("rssi_dBm", "TETHER_RSSI_DBM"), ("2nd", "TETHER_2ND"),
        ("_private", "TETHER__PRIVATE"), ("", "TETHER_"), ("höhe", "TETHER_H_HE"), ("a b\nc", "TETHER_A_B_C"),
    ])
    func metadataKeysMapToProjectFields(key: String, expected: String) {
        let name = JournalFieldName(metadataKey: key)
        #expect(name.rawValue == expected)
        #expect(JournalFieldName(validating: name.rawValue) == name)
    }

    @Test func longKeysAreCutToJournaldsLimit() throws {
        let name = JournalFieldName(metadataKey: String(repeating: "k", count: 100))
        #expect(name.rawValue.utf8.count == 64)
        #expect(name.rawValue == "TETHER_" + String(repeating: "K", count: 57))
        #expect(JournalFieldName(validating: name.rawValue) != nil)
    }

    @Test(arguments: ["MESSAGE", "A", "TETHER_X9", String(repeating: "A", count: 64)])
    func validNamesAreAccepted(name: String) {
        #expect(JournalFieldName(validating: name)?.rawValue == name)
    }

    @Test(arguments: ["", "_PID", "__CURSOR", "1ABC", "message", "A-B", "A B", "ÄB", String(repeating: "A", count: 65)])
    func namesJournaldWouldDropAreRejected(name: String) {
        #expect(JournalFieldName(validating: name) == nil)
    }
}
