#if canImport(Glibc)
import Glibc
#endif
import DBus
import FuzzDBusValues
import FuzzSupport

// D-Bus messages in both directions.
//
// An input starting with "l" or "B" (a message's byte-order mark) is wire bytes:
// libdbus validates them (dbus_message_demarshal) and the binding decodes the
// body into DBusValues, as for every message a peer sends. Whatever decodes
// must encode again (`wireFormat`), decode to the same message, and encode to
// the same bytes the second time.
//
// A decoded signal is also checked against match rules made from its own
// header (and variations of it): what a rule decides from libdbus's message,
// its body unread (`RawSignal`), must be what it decides from the decoded
// `Message`, with the same owners of well-known names.
//
// Any other input (minus its first byte) makes a message body out of typed
// values (`ValueGenerator`, up to 72 containers deep, including what D-Bus
// forbids): encoding must either refuse it with `.invalidArgument` or give
// bytes that libdbus accepts and that decode to the same values. libdbus
// aborts the process on some invalid input to its append functions, and that
// is a crash here too.

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = inputBytes(data, size)
    if bytes.first == UInt8(ascii: "l") || bytes.first == UInt8(ascii: "B") {
        checkWireBytes(bytes)
    } else {
        checkValues(FuzzInput(Array(bytes.dropFirst())))
    }
    return 0
}

@main
enum Main {
    static func main() {
        writeSeedsIfAsked(seeds)
        runLibFuzzer(testOneInput)
    }
}

/// FUZZ_VERBOSE=1: print what each input turns into (to turn a crasher into a test).
let verbose = getenv("FUZZ_VERBOSE") != nil

func checkWireBytes(_ bytes: [UInt8]) {
    let message: Message
    do {
        message = try Message(wireFormat: bytes)
    } catch {
        // A rejection names what is wrong; libdbus says NoMemory for some rejections,
        // which must not reach callers as an allocation failure.
        guard case .malformed = error else {
            require(false, "decoding \(bytes.count) bytes threw \(error), not .malformed")
            return
        }
        return
    }
    if verbose { printError("decoded \(dump(message))") }
    checkHeaderRules(bytes, message)
    require(
        message.signature == message.body.map(\.type.signature).joined(),
        "the body decoded as \(message.body.map(\.type.signature).joined()), the header says \(message.signature)"
    )
    let encoded: [UInt8]
    do {
        encoded = try message.wireFormat()
    } catch {
        require(false, "a message libdbus accepted does not encode again: \(error); \(message)")
        return
    }
    let again: Message
    do {
        again = try Message(wireFormat: encoded)
    } catch {
        require(false, "the encoding of a decoded message does not decode: \(error); \(message)")
        return
    }
    require(sameMessage(message, again), "the round trip changed the message:\n  \(dump(message))\n  \(dump(again))")
    let reencoded = try? again.wireFormat()
    require(reencoded == encoded, "encoding the same message twice gave different bytes")
}

func checkValues(_ input: FuzzInput) {
    var generator = ValueGenerator(input, options: .init(maxDepth: 72, invalid: true))
    var body: [DBusValue] = []
    while !generator.input.isAtEnd, body.count < 8 { body.append(generator.typedValue()) }
    if verbose { printError("body \(body.map(\.type.signature)): \(body)") }
    let message = Message(kind: .methodReturn, serial: 7, replySerial: 3, destination: ":1.7", body: body)
    let encoded: [UInt8]
    do {
        encoded = try message.wireFormat()
    } catch {
        guard case .invalidArgument = error else {
            require(false, "encoding a body threw \(error), not .invalidArgument")
            return
        }
        return
    }
    do {
        let decoded = try Message(wireFormat: encoded)
        require(same(decoded.body, body), "the body changed on the way through the wire:\n  \(body)\n  \(decoded.body)")
    } catch {
        require(false, "the binding encoded a body that does not decode again: \(error); \(body.map(\.type.signature))")
    }
}

func sameMessage(_ a: Message, _ b: Message) -> Bool {
    a.kind == b.kind && a.serial == b.serial && a.replySerial == b.replySerial && a.sender == b.sender
        && a.destination == b.destination && a.path == b.path && a.interface == b.interface && a.member == b.member
        && a.errorName == b.errorName && a.signature == b.signature && a.noReplyExpected == b.noReplyExpected
        && same(a.body, b.body)
}

func dump(_ m: Message) -> String {
    "\(m.kind) serial \(m.serial) reply \(m.replySerial) sender \(m.sender ?? "-") dest \(m.destination ?? "-") "
        + "path \(m.path?.rawValue ?? "-") \(m.interface ?? "-").\(m.member ?? "-") error \(m.errorName ?? "-") "
        + "noReply \(m.noReplyExpected) (\(m.signature)) \(m.body)"
}

// MARK: - Seeds

/// Messages as bluetoothd and the bus send them to Tether, and Tether's calls.
func seeds() -> [(name: String, bytes: [UInt8])] {
    typealias S = BlueZSamples
    let bluez = ":1.4"
    let messages: [(String, Message)] = [
        ("get-managed-objects-reply", Message(
            kind: .methodReturn, serial: 812, replySerial: 3, sender: bluez, destination: ":1.9",
            body: [S.managedObjects]
        )),
        ("interfaces-added-device", Message(
            kind: .signal, serial: 901, sender: bluez, path: "/", interface: StandardInterface.objectManager,
            member: "InterfacesAdded", body: [.objectPath(S.devicePath), S.interfaces("org.bluez.Device1", S.device)]
        )),
        ("interfaces-removed-device", Message(
            kind: .signal, serial: 902, sender: bluez, path: "/", interface: StandardInterface.objectManager,
            member: "InterfacesRemoved",
            body: [.objectPath(S.devicePath), .strings(["org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.bluez.Device1"])]
        )),
        ("properties-changed-disconnected", Message(
            kind: .signal, serial: 903, sender: bluez, path: S.devicePath, interface: StandardInterface.properties,
            member: "PropertiesChanged",
            body: S.propertiesChanged("org.bluez.Device1", ["Connected": .boolean(false), "ServicesResolved": .boolean(false)], invalidated: ["RSSI"])
        )),
        ("properties-changed-notification", Message(
            kind: .signal, serial: 904, sender: bluez, path: S.txPath, interface: StandardInterface.properties,
            member: "PropertiesChanged",
            body: S.propertiesChanged("org.bluez.GattCharacteristic1", ["Value": .bytes([0x0a, 0x0b, 0x0c, 0x00, 0xff])])
        )),
        ("name-owner-changed", Message(
            kind: .signal, serial: 5, sender: "org.freedesktop.DBus", destination: ":1.9", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
            body: [.string("org.bluez"), .string(""), .string(bluez)]
        )),
        ("error-connect-failed", Message(
            kind: .error, serial: 905, replySerial: 12, sender: bluez, destination: ":1.9",
            errorName: "org.bluez.Error.Failed", body: [.string("le-connection-abort-by-local")]
        )),
        ("call-write-value", Message(
            kind: .methodCall, serial: 13, destination: "org.bluez", path: S.rxPath,
            interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            body: [.bytes([0x00]), .vardict(["type": .string("command")])], noReplyExpected: false
        )),
        ("call-remove-match-no-reply", Message(
            kind: .methodCall, serial: 14, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "RemoveMatch",
            body: [.string("type='signal',sender='org.bluez',path_namespace='/org/bluez'")], noReplyExpected: true
        )),
        ("every-type", Message(
            kind: .methodReturn, serial: 15, replySerial: 14,
            body: [
                .structure([
                    .byte(0xff), .boolean(true), .int16(-2), .uint16(65535), .int32(Int32.min), .uint32(UInt32.max),
                    .int64(Int64.min), .uint64(UInt64.max), .double(-0.0), .string("é☃\u{1F600}"), .objectPath("/a/b_c"),
                    .signature("a{sv}(ii)"),
                ]),
                .variant(.variant(.double(.nan))), .array(element: .array(.string), [.strings(["a"]), .strings([])]),
                .dictionary(key: .int64, value: .structure([.boolean, .array(.byte)]), [.init(.int64(1), .structure([.boolean(false), .bytes([1])]))]),
            ]
        )),
    ]
    var result: [(name: String, bytes: [UInt8])] = []
    for (name, message) in messages {
        do {
            result.append((name, try message.wireFormat()))
        } catch {
            fatalError("seed \(name) does not encode: \(error)")
        }
    }
    // libdbus writes little-endian only; a peer may send big-endian. A method
    // return (serial 1, reply to 7) carrying the string "hi", by hand.
    result.append(("big-endian-return", [
        UInt8(ascii: "B"), 2, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 15,
        5, 1, UInt8(ascii: "u"), 0, 0, 0, 0, 7,
        8, 1, UInt8(ascii: "g"), 0, 1, UInt8(ascii: "s"), 0, 0,
        0, 0, 0, 2, UInt8(ascii: "h"), UInt8(ascii: "i"), 0,
    ]))
    // Value mode: a property bag, a snapshot, and the deepest nesting D-Bus
    // allows (32 arrays around 32 structs) as typed values.
    var deepest = DBusValue.byte(1)
    for _ in 0..<32 { deepest = .structure([deepest]) }
    for _ in 0..<32 { deepest = .array(element: deepest.type, [deepest]) }
    for (name, value) in [
        ("values-vardict", DBusValue.vardict(BlueZSamples.device)), ("values-managed-objects", BlueZSamples.managedObjects),
        ("values-deepest-nesting", deepest),
    ] {
        var writer = ValueWriter()
        writer.output.byte(0)
        writer.typedValue(value)
        result.append((name, writer.output.bytes))
    }
    return result
}

/// The header-level rule checks (RawSignal) agree with the decoded message's.
func checkHeaderRules(_ bytes: [UInt8], _ message: Message) {
    var rules: [MatchRule] = [MatchRule(), MatchRule(sender: "org.freedesktop.DBus"), MatchRule(sender: "org.bluez")]
    let path = message.path
    let firstString: String? = if case .string(let first)? = message.body.first { first } else { nil }
    rules.append(MatchRule(
        sender: message.sender, interface: message.interface, member: message.member, path: path,
        arg0: firstString, signature: message.signature
    ))
    rules.append(MatchRule(sender: message.sender, pathNamespace: path?.parent ?? .root, signature: message.signature + "s"))
    rules.append(MatchRule(interface: message.interface.map { $0 + "x" }, arg0: firstString.map { $0 + "x" }))
    if let path { rules.append(MatchRule(pathNamespace: path)) }
    let owners: [String: String] = message.sender.map { ["org.bluez": $0] } ?? [:]
    let owner = { (name: String) in owners[name] }
    let verdicts = RawSignal.borrowing(wireFormat: bytes) { raw in rules.map { $0.matches(raw, owner: owner) } }
    guard let verdicts else {
        require(false, "libdbus refused bytes it had decoded")
        return
    }
    for (rule, raw) in zip(rules, verdicts) {
        let decoded = rule.matches(message, owner: owner)
        require(raw == decoded, "rule \(rule) (signature \(rule.signature ?? "-")): header check \(raw), decoded \(decoded); \(dump(message))")
    }
}
