@testable import Readings
import Testing

struct RecordFormatTests {
    @Test(arguments: [0, 1, 9, 10, 99, 100, 1234, 1_000_000, UInt64(UInt32.max), UInt64.max - 1, UInt64.max])
    func decimalsMatchTheStandardLibrary(value: UInt64) {
        var buffer: [UInt8] = [UInt8(ascii: "x")]
        RecordFormat.appendDecimal(value, to: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == "x" + String(value))
    }
}
