import Foundation
import PayloadLayout
import Readings
import Testing

/// The declared payload (`[decode]`) against payloads: each type, both byte
/// orders, sign extension, scale, padding, and what does not fit.
struct PayloadLayoutTests {
    func layout(_ fields: [String], characteristic: String? = nil) throws -> PayloadLayout {
        try PayloadLayout(fields: fields.map { text in try PayloadLayout.Field.parse(text) }, characteristic: characteristic)
    }

    @Test func theSimulatorsPayloadDecodes() throws {
        let layout = try layout(["sequence:u32le", "temperature_c:i16le*0.01", "humidity_pct:u16le*0.01"])
        // seq 1234, 21.50 °C, 45.00 %
        let payload: [UInt8] = [0xd2, 0x04, 0x00, 0x00, 0x66, 0x08, 0x94, 0x11]
        #expect(layout.json(payload) == #"{"sequence":1234,"temperature_c":21.5,"humidity_pct":45}"#)
    }

    @Test func everyTypeInBothByteOrders() throws {
        let layout = try layout(["a:u8", "b:i8", "c:u16be", "d:i16be", "e:i32le", "f:u64be", "g:f32le", "h:f64be", "_:u8", "i:bytes3"])
        var payload: [UInt8] = [0xff, 0xff, 0x01, 0x02, 0xff, 0xfe, 0xfe, 0xff, 0xff, 0xff]
        payload += [0, 0, 0, 0, 0, 0, 0x01, 0x00]
        payload += [0x00, 0x00, 0xc0, 0x3f]  // 1.5 as a little-endian float
        payload += [0x40, 0x04, 0, 0, 0, 0, 0, 0]  // 2.5 as a big-endian double
        payload += [0x99, 0x0a, 0x0b, 0x0c]
        #expect(layout.size == payload.count)
        #expect(layout.json(payload) == #"{"a":255,"b":-1,"c":258,"d":-2,"e":-2,"f":256,"g":1.5,"h":2.5,"i":"0a0b0c"}"#)
    }

    @Test func aScaleThatIsAFractionDividesExactly() throws {
        #expect(try layout(["t:i16le*0.01"]).json([0x66, 0x08]) == #"{"t":21.5}"#)
        #expect(try layout(["t:i16le*0.1"]).json([0xfd, 0xff]) == #"{"t":-0.3}"#)
        #expect(try layout(["t:u8*2.5"]).json([4]) == #"{"t":10}"#)
        #expect(try layout(["t:u16le*0.001"]).json([0x39, 0x30]) == #"{"t":12.345}"#)
    }

    @Test func aFloatThatIsNotANumberIsNull() throws {
        #expect(try layout(["t:f32le"]).json([0x00, 0x00, 0xc0, 0x7f]) == #"{"t":null}"#)
    }

    @Test func aPayloadOfAnotherLengthDoesNotFit() throws {
        let layout = try layout(["a:u16le", "b:u8"])
        #expect(layout.json([1, 2]) == nil)
        #expect(layout.json([1, 2, 3, 4]) == nil)
        #expect(layout.json([1, 0, 3]) == #"{"a":1,"b":3}"#)
    }

    @Test func aRecordLineGetsFieldsBesideItsHex() throws {
        let layout = try layout(["sequence:u32le", "t:i16le*0.01"], characteristic: "6e400003-b5a3-f393-e0a9-e50e24dcca9e")
        let line = #"{"ts":"2026-12-06T10:00:00.000Z","seq":7,"device":"AA:BB:CC:DD:EE:FF","char":"6e400003-b5a3-f393-e0a9-e50e24dcca9e","source":"notify","hex":"d204000066 08","v":2}"#
            .replacingOccurrences(of: " ", with: "")
        let outcome = RecordFields.annotate(Array(line.utf8), with: layout)
        #expect(outcome == .decoded(Array((line.dropLast() + #","fields":{"sequence":1234,"t":21.5}}"#).utf8)))
        let short = line.replacingOccurrences(of: "d20400006608", with: "d2040000")
        #expect(RecordFields.annotate(Array(short.utf8), with: layout) == .undecodable(payloadBytes: 4))
        let other = line.replacingOccurrences(of: "6e400003", with: "6e400004")
        #expect(RecordFields.annotate(Array(other.utf8), with: layout) == .notDescribed, "another characteristic's payload")
        let gap = #"{"ts":"2026-12-06T10:00:00.000Z","seq":8,"device":"AA:BB:CC:DD:EE:FF","source":"gap","count":3,"v":2}"#
        #expect(RecordFields.annotate(Array(gap.utf8), with: layout) == .notDescribed)
    }
}
