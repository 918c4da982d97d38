import Testing

@testable import Rfkill

@Suite struct RfkillEventTests {
    @Test func decodesTheKernelsRecordAndEncodesAChange() throws {
        // rfkill3: Bluetooth (type 2), added (op 0), soft blocked, not hard.
        let record: [UInt8] = [3, 0, 0, 0, 2, 0, 1, 0]
        let event = try #require(RfkillEvent(bytes: record))
        #expect(event == RfkillEvent(index: 3, type: 2, operation: .add, softBlocked: true, hardBlocked: false))
        let unblock = RfkillEvent(index: 258, type: 0, operation: .change, softBlocked: false, hardBlocked: false)
        #expect(unblock.bytes == [2, 1, 0, 0, 0, 2, 0, 0])
    }

    @Test func aShortRecordOrAnUnknownOperationIsRefused() {
        #expect(RfkillEvent(bytes: [3, 0, 0, 0, 2, 0, 1]) == nil)
        #expect(RfkillEvent(bytes: [3, 0, 0, 0, 2, 9, 1, 0]) == nil)
    }
}

@Suite struct RfkillSwitchesTests {
    @Test func followsAControllersSwitchThroughAddChangeAndDelete() {
        var switches = RfkillSwitches()
        let names: [UInt32: String] = [0: "phy0", 1: "hci0"]
        #expect(switches.apply(RfkillEvent(index: 0, type: 1, operation: .add, softBlocked: false, hardBlocked: false)) { names[$0] })
        #expect(switches.apply(RfkillEvent(index: 1, type: 2, operation: .add, softBlocked: false, hardBlocked: false)) { names[$0] })
        #expect(switches.bluetoothSwitch(named: "hci0")?.softBlocked == false)
        #expect(switches.bluetoothSwitch(named: "phy0") == nil)  // Wi-Fi, not Bluetooth
        #expect(switches.apply(RfkillEvent(index: 1, type: 2, operation: .change, softBlocked: true, hardBlocked: false)) { _ in nil })
        #expect(switches.bluetoothSwitch(named: "hci0")?.softBlocked == true)
        // The same state again changes nothing.
        #expect(!switches.apply(RfkillEvent(index: 1, type: 2, operation: .change, softBlocked: true, hardBlocked: false)) { _ in nil })
        #expect(switches.apply(RfkillEvent(index: 1, type: 2, operation: .change, softBlocked: true, hardBlocked: true)) { _ in nil })
        #expect(switches.bluetoothSwitch(named: "hci0")?.hardBlocked == true)
        #expect(switches.apply(RfkillEvent(index: 1, type: 2, operation: .delete, softBlocked: false, hardBlocked: false)) { _ in nil })
        #expect(switches.bluetoothSwitch(named: "hci0") == nil)
    }
}
