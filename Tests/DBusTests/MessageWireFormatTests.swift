import DBus
import Testing

/// `Message(wireFormat:)` and `wireFormat()`, and the marshalling checks behind
/// them. The regression cases come from `make fuzz` (Fuzz/README.md).
@Suite("D-Bus wire format")
struct MessageWireFormatTests {
    static func reply(_ body: [DBusValue]) -> Message {
        Message(kind: .methodReturn, serial: 7, replySerial: 3, destination: ":1.7", body: body)
    }

    static func roundTrip(_ message: Message) throws -> Message {
        try Message(wireFormat: try message.wireFormat())
    }

    /// Encoding `body` must throw `.invalidArgument` (and not abort in libdbus).
    static func expectRefused(_ body: [DBusValue], sourceLocation: SourceLocation = #_sourceLocation) {
        let error = #expect(throws: DBusError.self, sourceLocation: sourceLocation) { _ = try reply(body).wireFormat() }
        guard case .invalidArgument = error else {
            Issue.record("expected .invalidArgument, got \(String(describing: error))", sourceLocation: sourceLocation)
            return
        }
    }

    @Test func everyHeaderAndABlueZShapedBodyRoundTrip() throws {
        let signal = Message(
            kind: .signal, serial: 901, sender: ":1.4", destination: ":1.9", path: "/", interface: "org.freedesktop.DBus.ObjectManager",
            member: "InterfacesAdded",
            body: [
                .objectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"),
                .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                    .init(.string("org.bluez.Device1"), .vardict([
                        "Address": .string("AA:BB:CC:DD:EE:FF"), "RSSI": .int16(-67), "Connected": .boolean(true),
                        "ManufacturerData": .dictionary(key: .uint16, value: .variant, [.init(.uint16(0x59), .variant(.bytes([1, 2])))]),
                    ])),
                ]),
            ]
        )
        let again = try Self.roundTrip(signal)
        #expect(again.kind == .signal && again.serial == 901 && again.sender == ":1.4" && again.destination == ":1.9")
        #expect(again.path == "/" && again.interface == "org.freedesktop.DBus.ObjectManager" && again.member == "InterfacesAdded")
        #expect(again.signature == "oa{sa{sv}}")
        #expect(again.body == signal.body)

        let error = Message(kind: .error, serial: 5, replySerial: 4, errorName: "org.bluez.Error.Failed", body: [.string("le-connection-abort-by-local")])
        let errorAgain = try Self.roundTrip(error)
        #expect(errorAgain.kind == .error && errorAgain.replySerial == 4 && errorAgain.errorName == "org.bluez.Error.Failed")

        let call = Message(kind: .methodCall, serial: 9, path: "/org/bluez/hci0", member: "StartDiscovery", noReplyExpected: true)
        #expect(try Self.roundTrip(call).noReplyExpected)
    }

    @Test func aBigEndianMessageDecodes() throws {
        // A method return (serial 1, reply to 7) carrying "hi", as a big-endian peer sends it.
        let bytes: [UInt8] = [
            UInt8(ascii: "B"), 2, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 15,
            5, 1, UInt8(ascii: "u"), 0, 0, 0, 0, 7,
            8, 1, UInt8(ascii: "g"), 0, 1, UInt8(ascii: "s"), 0, 0,
            0, 0, 0, 2, UInt8(ascii: "h"), UInt8(ascii: "i"), 0,
        ]
        let message = try Message(wireFormat: bytes)
        #expect(message.kind == .methodReturn && message.replySerial == 7 && message.body == [.string("hi")])
    }

    @Test func truncatedOrTrailingBytesAreMalformedNotOutOfMemory() throws {
        let bytes = try Self.reply([.string("hello")]).wireFormat()
        for broken in [[], Array(bytes.prefix(10)), Array(bytes.dropLast()), bytes + [0]] {
            let error = #expect(throws: DBusError.self) { _ = try Message(wireFormat: broken) }
            guard case .malformed = error else {
                Issue.record("\(broken.count) bytes: expected .malformed, got \(String(describing: error))")
                continue
            }
        }
    }

    /// Found by `make fuzz` (dbus-message): BlueZ's Failed error with its type
    /// byte changed from 3 to 7. libdbus accepts types it does not know (the
    /// spec says to ignore them), and the binding decoded it as a signal: one
    /// without a path or member, with an error name, that did not encode again.
    /// A pending call would have taken such a message, naming its serial, as a
    /// successful reply.
    @Test func anUnknownMessageTypeIsRefusedNotTakenForASignal() throws {
        var bytes = try Message(
            kind: .error, serial: 905, replySerial: 12, sender: ":1.4", destination: ":1.9",
            errorName: "org.bluez.Error.Failed", body: [.string("le-connection-abort-by-local")]
        ).wireFormat()
        #expect(bytes[1] == 3)
        bytes[1] = 7
        let error = #expect(throws: DBusError.self) { _ = try Message(wireFormat: bytes) }
        #expect(error == .malformed("unknown message type 7"))
    }

    @Test func incompleteHeadersAreRefused() {
        let incomplete = [
            Message(kind: .methodCall, serial: 1, member: "Ping"),
            Message(kind: .signal, serial: 1, path: "/", member: "Changed"),
            Message(kind: .error, serial: 1, replySerial: 1),
            Message(kind: .methodReturn, serial: 1),
            Message(kind: .methodReturn, serial: 0, replySerial: 1),
            Message(kind: .signal, serial: 1, path: "/org/freedesktop/DBus/Local", interface: "a.b", member: "C"),
        ]
        for message in incomplete {
            #expect(throws: DBusError.self) { _ = try message.wireFormat() }
        }
    }

    /// Found by `make fuzz` (dbus-message): a property bag with a variant holding
    /// an empty struct. libdbus has no signature for "()" and aborted the process
    /// in dbus_message_iter_open_container instead of the binding refusing it.
    @Test func aVariantOfAnEmptyStructIsRefusedNotAnAbort() {
        let managedObjects = DBusValue.dictionary(
            key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), [
                .init(.objectPath("/org/bluez/hci0"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                    .init(.string("org.bluez.Adapter1"), .vardict([
                        "Modalias": .string("usb:v1D6Bp0246d0542"),
                        "org.bluez.GattCharacteristic1": .structure([]),
                    ])),
                ])),
            ]
        )
        Self.expectRefused([managedObjects])
    }

    /// The same defect for every container libdbus is handed a type it has no
    /// signature for, or a body it would marshal into a message it then rejects.
    @Test(arguments: [
        "array of empty structs", "variant of a dictionary keyed by variants", "dictionary of empty structs",
        "signature over 255 characters", "variants 65 deep",
    ])
    func invalidBodiesAreRefusedNotAborts(what: String) {
        let body: [DBusValue] = switch what {
        case "array of empty structs": [.array(element: .structure([]), [])]
        case "variant of a dictionary keyed by variants": [.variant(.dictionary(key: .variant, value: .string, []))]
        case "dictionary of empty structs": [.dictionary(key: .string, value: .structure([]), [])]
        case "signature over 255 characters": Array(repeating: .structure([.byte(0)]), count: 86)
        default: [(0..<65).reduce(DBusValue.byte(0)) { inner, _ in .variant(inner) }]
        }
        Self.expectRefused(body)
    }

    /// Found by `make fuzz` (dbus-message): the deepest nesting D-Bus allows (32
    /// arrays around 32 structs) went out, but the binding could not read it back:
    /// its signature parser stopped one level short. Then: libdbus allows 32
    /// arrays in a row, then a struct, then 32 more; the parser stopped at 64.
    @Test func theDeepestNestingDBusAllowsRoundTrips() throws {
        var deepest = DBusValue.byte(1)
        for _ in 0..<32 { deepest = .structure([deepest]) }
        for _ in 0..<32 { deepest = .array(element: deepest.type, [deepest]) }
        #expect(try Self.roundTrip(Self.reply([deepest])).body == [deepest])
        // libdbus limits runs of arrays, not arrays in all: 64 of them, split by a
        // struct, are a valid type (here of an empty array: its elements could
        // not nest that deep).
        var split = DBusType.structure([.byte])
        for _ in 0..<32 { split = .array(split) }
        split = .structure([split])
        for _ in 0..<31 { split = .array(split) }
        let empty = DBusValue.array(element: split, [])
        #expect(empty.type.signature.count == 69)
        #expect(try Self.roundTrip(Self.reply([empty])).body == [empty])
        // Variants may nest as deep as libdbus lets any value nest: 64 containers.
        let variants = (0..<64).reduce(DBusValue.byte(0)) { inner, _ in .variant(inner) }
        #expect(try Self.roundTrip(Self.reply([variants])).body == [variants])
    }
}
