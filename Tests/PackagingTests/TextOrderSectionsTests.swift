import Foundation
import Testing

/// packaging/text-order-sections.py, which turns the functions callgrind saw
/// run into the input sections packaging/text-order.ld gathers. A name the
/// linker does not see as a section orders nothing, silently: the binary
/// still links, only larger in memory. These cases are the three ways that
/// happened (docs/development.md, "The code layout").
@Suite struct TextOrderSectionsTests {
    /// A link map in GNU ld's layout: short section names on the line of their
    /// address, long ones on a line of their own.
    static let map = """
        Memory map

        .text.tether    0x0000000000001000        0x0
        .text           0x0000000000002000     0x5000
         .text          0x0000000000002000       0x20 /usr/lib/x86_64-linux-gnu/Scrt1.o
         .text._ZNSt8ios_base4InitC2Ev
                        0x0000000000002100      0x100 /usr/lib/gcc/x86_64-linux-gnu/12/libstdc++.a(ios_init.o)
         .text.$s4DBus3BusC4openyyF
                        0x0000000000002200      0x300 /work/.build/release/DBus.build/Bus.swift.o
         .text          0x0000000000003000     0x1000 /toolchain/lib/swift_static/linux/libswiftCore.a(Swift.o)
         .text.$s4DBus3BusC5closeyyF
                        0x0000000000004000      0x100 /work/.build/release/DBus.build/Bus.swift.o

        .fini           0x0000000000007000        0x9
        """

    /// `nm`: the constructor's complete-object name (C1) is an alias of the
    /// base-object one (C2) at the same address, and its section is named after C2.
    static let nm = """
        0000000000002100 T _ZNSt8ios_base4InitC1Ev
        0000000000002100 T _ZNSt8ios_base4InitC2Ev
        0000000000002200 T $s4DBus3BusC4openyyF
        0000000000003400 t $ss13_StringObjectV7rawBitsyyF
        0000000000003800 t $ss11_StringGutsV5countSivg
        0000000000004000 T $s4DBus3BusC5closeyyF
        0000000000009000 D $s4DBus3BusCMn
        """

    static func sections(executed: [String]) throws -> [String] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("text-order-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let files = ["map": map, "nm": nm, "executed": executed.joined(separator: "\n") + "\n"]
        for (name, text) in files {
            try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        let result = try Packaging.run("python3", [
            Packaging.path("packaging/text-order-sections.py"),
            directory.appendingPathComponent("nm").path, directory.appendingPathComponent("map").path,
            directory.appendingPathComponent("executed").path,
        ])
        try #require(result.status == 0, "\(result)")
        return result.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.hasSuffix("whole objects") }
    }

    @Test func aFunctionInASectionOfItsOwnIsNamedBySection() throws {
        #expect(try Self.sections(executed: ["$s4DBus3BusC4openyyF"]) == ["*(.text.$s4DBus3BusC4openyyF)"])
    }

    @Test func anAliasOrdersTheSectionItLivesIn() throws {
        #expect(try Self.sections(executed: ["_ZNSt8ios_base4InitC1Ev"]) == ["*(.text._ZNSt8ios_base4InitC2Ev)"])
    }

    @Test func codeWithoutSectionsOfItsOwnOrdersItsWholeObjectOnceAfterTheFunctions() throws {
        let sections = try Self.sections(executed: [
            "$ss13_StringObjectV7rawBitsyyF", "$s4DBus3BusC5closeyyF", "$ss11_StringGutsV5countSivg", "_start",
            "$s4DBus3BusC4openyyF", "$s4DBus3BusC5closeyyF",
        ])
        #expect(sections == [
            "*(.text.$s4DBus3BusC5closeyyF)", "*(.text.$s4DBus3BusC4openyyF)", "*libswiftCore.a:Swift.o(.text)",
        ])
    }

    @Test func namesTheBinaryDoesNotDefineAreSkipped() throws {
        #expect(try Self.sections(executed: ["$s4DBus3BusCMn", "malloc", "$s4DBus3BusC4openyyF"]) == ["*(.text.$s4DBus3BusC4openyyF)"])
    }
}
