import BlueZ
import DBus
import FuzzDBusValues
import FuzzSupport

// BlueZ property dictionaries → ObjectTree and its typed views (Adapter,
// Device, GattCharacteristic).
//
// The input is a sequence of operations: ObjectManager and PropertiesChanged
// signals (and signals of other interfaces) whose bodies are typed values of
// any shape (`ValueGenerator`), and GetManagedObjects snapshots. Each signal
// goes through the wire (`wireFormat`, `Message(wireFormat:)`), so the client
// sees exactly what the bus connection would deliver, then through
// `BlueZClient.event(from:)` into `ObjectTree.apply`. Checked after each step:
// the tree equals a plain model of what the signals say (atomic updates,
// variants unwrapped, `Value` never stored, only org.bluez.* interfaces, no
// empty objects); the typed views agree with the tree; at the end, the tree
// survives a GetManagedObjects round trip through the wire unchanged.

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var generator = ValueGenerator(FuzzInput(inputBytes(data, size)), options: .init(maxDepth: 10, invalid: false))
    var tree = ObjectTree()
    var model: Objects = [:]
    var serial: UInt32 = 1
    while !generator.input.isAtEnd, serial < 64 {
        serial += 1
        guard let operation = Operation(generator: &generator) else { continue }
        switch operation {
        case .snapshot(let value):
            guard let decoded = throughTheWire(Message(kind: .methodReturn, serial: serial, replySerial: 1, sender: ":1.4", body: [value]))
            else { continue }
            let expected = Model.snapshot(decoded[0])
            do {
                tree = try ObjectTree(managedObjects: decoded[0])
                require(expected != nil, "a malformed GetManagedObjects reply was accepted: \(value)")
            } catch {
                require(expected == nil, "a GetManagedObjects reply was refused: \(error); \(value)")
            }
            model = expected ?? model
        case .signal(let path, let interface, let member, let body):
            let message = Message(kind: .signal, serial: serial, sender: ":1.4", path: path, interface: interface, member: member, body: body)
            guard let delivered = throughTheWire(message) else { continue }
            let decoded = Message(kind: .signal, serial: serial, sender: ":1.4", path: path, interface: interface, member: member, body: delivered)
            let event = BlueZClient.event(from: decoded)
            checkClassification(event, of: decoded)
            if let event {
                let applied = tree.apply(event)
                let expected = Model.apply(event, to: model)
                require(applied == (expected != nil), "apply said \(applied) for \(event)")
                model = expected ?? model
            }
        }
        require(sameObjects(tree.objects, model), "the tree differs from the model after \(operation):\n  \(tree.objects)\n  \(model)")
        checkInvariants(tree)
    }
    checkSnapshotRoundTrip(tree)
    return 0
}

@main
enum Main {
    static func main() {
        writeSeedsIfAsked(seeds)
        runLibFuzzer(testOneInput)
    }
}

typealias Objects = [ObjectPath: [String: ObjectTree.Properties]]

// MARK: - Operations

enum Operation: CustomStringConvertible {
    case signal(path: ObjectPath, interface: String, member: String, body: [DBusValue])
    case snapshot(DBusValue)

    /// For code 4: every pairing of these but the three the client handles must be ignored.
    static let interfaces = [
        "org.freedesktop.DBus", StandardInterface.objectManager, StandardInterface.properties, "org.bluez.Device1",
    ]
    static let members = ["InterfacesAdded", "InterfacesRemoved", "PropertiesChanged", "NameOwnerChanged"]

    /// One code byte: 0 InterfacesAdded, 1 InterfacesRemoved, 2 PropertiesChanged
    /// (each on its standard interface), 3 a snapshot, 4 a signal with an interface
    /// and a member picked by two more bytes. Signals: header path, argument
    /// count, arguments.
    init?(generator: inout ValueGenerator) {
        let code = generator.input.byte() % 5
        if code == 3 {
            self = .snapshot(generator.typedValue())
            return
        }
        let path = generator.path()
        let interface: String, member: String
        switch code {
        case 0: (interface, member) = (StandardInterface.objectManager, "InterfacesAdded")
        case 1: (interface, member) = (StandardInterface.objectManager, "InterfacesRemoved")
        case 2: (interface, member) = (StandardInterface.properties, "PropertiesChanged")
        default:
            interface = Self.interfaces[Int(generator.input.byte()) % Self.interfaces.count]
            member = Self.members[Int(generator.input.byte()) % Self.members.count]
        }
        let count = Int(generator.input.byte()) % 4
        self = .signal(path: path, interface: interface, member: member, body: (0..<count).map { _ in generator.typedValue() })
    }

    var description: String {
        switch self {
        case .signal(let path, let interface, let member, let body): "\(interface).\(member) on \(path) \(body)"
        case .snapshot(let value): "GetManagedObjects \(value)"
        }
    }
}

/// The body as the bus connection would deliver it: encoded by the binding,
/// validated by libdbus, decoded again. Nil for a body no D-Bus message can
/// carry (a signature over 255 characters, which the generator can make).
func throughTheWire(_ message: Message) -> [DBusValue]? {
    do {
        let decoded = try Message(wireFormat: try message.wireFormat())
        require(same(decoded.body, message.body), "the wire changed a body: \(message.body) → \(decoded.body)")
        return decoded.body
    } catch {
        require(!fitsSignatureLimit(message.body), "a well-formed body does not go through the wire: \(error); \(message.body)")
        return nil
    }
}

/// Whether the body's signature, and that of every variant in it, has at most 255 characters.
func fitsSignatureLimit(_ body: [DBusValue]) -> Bool {
    func fits(_ value: DBusValue) -> Bool {
        switch value {
        case .variant(let inner): inner.type.signature.utf8.count <= 255 && fits(inner)
        case .array(_, let elements): elements.allSatisfy(fits)
        case .dictionary(_, _, let entries): entries.allSatisfy { fits($0.key) && fits($0.value) }
        case .structure(let fields): fields.allSatisfy(fits)
        default: true
        }
    }
    return body.map(\.type.signature).joined().utf8.count <= 255 && body.allSatisfy(fits)
}

// MARK: - Model

/// What the tree should hold, from the D-Bus values alone.
enum Model {
    /// The entries of an `a{s…}`-like dictionary (keys that are strings, object
    /// paths or signatures), later duplicates winning; nil for anything else.
    static func stringKeyed(_ value: DBusValue) -> [String: DBusValue]? {
        guard case .dictionary(_, _, let entries) = value.unwrapped else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            switch entry.key.unwrapped {
            case .string(let key), .signature(let key): result[key] = entry.value
            case .objectPath(let key): result[key.rawValue] = entry.value
            default: return nil
            }
        }
        return result
    }

    /// InterfacesAdded on `objects`: nil if the interfaces are malformed (nothing changes then).
    static func add(_ path: ObjectPath, _ interfaces: DBusValue, to objects: Objects) -> Objects? {
        guard let byName = stringKeyed(interfaces) else { return nil }
        var object = objects[path] ?? [:]
        for (name, value) in byName where name.hasPrefix("org.bluez.") {
            guard let properties = stringKeyed(value) else { return nil }
            var stored = object[name] ?? [:]
            for (key, property) in properties where key != "Value" { stored[key] = property.unwrapped }
            object[name] = stored
        }
        var result = objects
        if !object.isEmpty { result[path] = object }
        return result
    }

    static func snapshot(_ value: DBusValue) -> Objects? {
        guard case .dictionary(_, _, let entries) = value.unwrapped else { return nil }
        var byPath: [ObjectPath: DBusValue] = [:]
        for entry in entries {
            guard case .objectPath(let path) = entry.key.unwrapped else { return nil }
            byPath[path] = entry.value
        }
        var objects: Objects = [:]
        for (path, interfaces) in byPath {
            guard let added = add(path, interfaces, to: objects) else { return nil }
            objects = added
        }
        return objects
    }

    /// The objects after `event`; nil when the tree must refuse it (and stay as it is).
    static func apply(_ event: BlueZEvent, to objects: Objects) -> Objects? {
        switch event {
        case .interfacesAdded(let path, let interfaces):
            return add(path, interfaces, to: objects)
        case .interfacesRemoved(let path, let names):
            var result = objects
            if var object = result[path] {
                for name in names { object[name] = nil }
                result[path] = object.isEmpty ? nil : object
            }
            return result
        case .propertiesChanged(let path, let interface, let changed, let invalidated):
            var result = objects
            guard var properties = result[path]?[interface] else { return result }
            for (key, value) in changed where key != "Value" { properties[key] = value.unwrapped }
            for key in invalidated { properties[key] = nil }
            result[path]?[interface] = properties
            return result
        case .valueChanged, .signalsLost, .deviceDisconnected, .serviceUnanswered:
            return nil
        case .serviceAppeared(_, let tree):
            return tree.objects
        case .serviceVanished:
            return [:]
        }
    }
}

func sameObjects(_ a: Objects, _ b: Objects) -> Bool {
    a.count == b.count && a.allSatisfy { path, interfaces in
        guard let other = b[path], other.count == interfaces.count else { return false }
        return interfaces.allSatisfy { name, properties in
            guard let otherProperties = other[name], otherProperties.count == properties.count else { return false }
            return properties.allSatisfy { key, value in otherProperties[key].map { same($0, value) } ?? false }
        }
    }
}

// MARK: - Checks

/// What `BlueZClient.event(from:)` may make of a signal.
func checkClassification(_ event: BlueZEvent?, of signal: Message) {
    guard let event else { return }
    switch event {
    case .interfacesAdded(let path, _), .interfacesRemoved(let path, _):
        require(signal.interface == StandardInterface.objectManager, "\(event) from \(signal)")
        require(signal.body.first?.objectPath == path, "\(event) names another object than \(signal.body)")
    case .propertiesChanged(let path, _, _, _):
        require(signal.interface == StandardInterface.properties && signal.member == "PropertiesChanged", "\(event) from \(signal)")
        require(path == signal.path, "\(event) is not for the signal's object \(signal.path?.rawValue ?? "-")")
    case .valueChanged(let path, let bytes):
        require(signal.interface == StandardInterface.properties && path == signal.path, "\(event) from \(signal)")
        require(signal.body.first?.string == BlueZ.gattCharacteristicInterface, "a Value change not from a characteristic")
        require(signal.body.count > 1 && Model.stringKeyed(signal.body[1])?["Value"]?.bytes == bytes, "\(event) from \(signal.body)")
    case .deviceDisconnected(let path, let reason, _):
        require(signal.interface == BlueZ.deviceInterface && signal.member == "Disconnected", "\(event) from \(signal)")
        require(path == signal.path && signal.body.first?.string == reason, "\(event) from \(signal.body)")
    case .serviceAppeared, .serviceVanished, .signalsLost, .serviceUnanswered:
        require(false, "\(event) from a single signal")
    }
}

func checkInvariants(_ tree: ObjectTree) {
    for (path, interfaces) in tree.objects {
        require(!interfaces.isEmpty, "\(path) is kept with no interfaces")
        for (name, properties) in interfaces {
            require(name.hasPrefix("org.bluez."), "\(name) on \(path) is kept")
            require(properties["Value"] == nil, "a Value is kept on \(path)")
            for (key, value) in properties {
                if case .variant = value { require(false, "\(path) \(name).\(key) is stored as a variant") }
            }
        }
    }
    let paths = tree.objects.keys.sorted()

    let adapters = tree.adapters
    require(adapters.map(\.path) == paths.filter { tree.properties($0, BlueZ.adapterInterface) != nil }, "adapters are not the Adapter1 objects in path order")
    for adapter in adapters {
        require(tree.adapter(adapter.path) == adapter, "adapter(\(adapter.path)) disagrees with adapters")
        _ = adapter.interfaceName
    }

    let devices = tree.devices
    require(devices.map(\.path) == paths.filter { tree.properties($0, BlueZ.deviceInterface) != nil }, "devices are not the Device1 objects in path order")
    var devicePaths = Set(devices.map(\.path))
    devicePaths.formUnion(knownPaths.filter { $0.rawValue.contains("/dev_") })
    for device in devices {
        require(tree.device(device.path) == device, "device(\(device.path)) disagrees with devices")
        require(device.address == device.address.uppercased(), "device address \(device.address) is not uppercase")
        require(device.uuids.allSatisfy { $0 == $0.lowercased() }, "device UUIDs \(device.uuids) are not lowercase")
        let adapter = device.adapter ?? "/org/bluez/hci0"
        if let derived = Device.path(adapter: adapter, address: device.address) {
            require(derived.parent == adapter, "Device.path(\(adapter), \(device.address)) = \(derived) is not a child")
        }
    }
    for device in devicePaths {
        let characteristics = tree.characteristics(of: device)
        require(characteristics.map(\.path) == characteristics.map(\.path).sorted(), "characteristics of \(device) are not in path order")
        for characteristic in characteristics {
            let below = device == .root ? characteristic.path != .root : characteristic.path.rawValue.hasPrefix(device.rawValue + "/")
            require(below, "\(characteristic.path) is not below \(device)")
            require(characteristic.uuid == characteristic.uuid.lowercased(), "characteristic UUID \(characteristic.uuid) is not lowercase")
            _ = (characteristic.canNotify, characteristic.canRead, characteristic.canWriteCommand, characteristic.canWriteRequest)
            let found = tree.characteristic(uuid: characteristic.uuid.uppercased(), of: device)
            require(found == characteristics.first { $0.uuid == characteristic.uuid }, "characteristic(uuid:) is not the first with \(characteristic.uuid)")
        }
    }
}

/// The tree as a GetManagedObjects reply, through the wire, back to a tree.
func checkSnapshotRoundTrip(_ tree: ObjectTree) {
    let entries = tree.objects.keys.sorted().map { path in
        DBusValue.DictionaryEntry(.objectPath(path), .dictionary(
            key: .string, value: .dictionary(key: .string, value: .variant),
            (tree.objects[path] ?? [:]).keys.sorted().map { name in
                .init(.string(name), .vardict(tree.objects[path]?[name] ?? [:]))
            }
        ))
    }
    let reply = DBusValue.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)
    // Every stored value came through the wire inside a variant, so its signature fits.
    guard let body = throughTheWire(Message(kind: .methodReturn, serial: 99, replySerial: 1, sender: ":1.4", body: [reply])) else {
        require(false, "the tree's own snapshot cannot be sent")
        return
    }
    do {
        let rebuilt = try ObjectTree(managedObjects: body[0])
        require(sameObjects(rebuilt.objects, tree.objects), "the tree changed in a snapshot round trip")
    } catch {
        require(false, "the tree's own snapshot is refused: \(error)")
    }
}

// MARK: - Seeds

private struct SeedWriter {
    var writer = ValueWriter()

    mutating func signal(_ code: UInt8, _ path: ObjectPath, _ body: [DBusValue]) {
        writer.output.byte(code)
        writer.path(path)
        writer.output.byte(UInt8(body.count))
        body.forEach { writer.typedValue($0) }
    }

    mutating func interfacesAdded(_ path: ObjectPath, _ name: String, _ properties: [String: DBusValue]) {
        signal(0, "/", [.objectPath(path), BlueZSamples.interfaces(name, properties)])
    }

    mutating func interfacesRemoved(_ path: ObjectPath, _ names: [String]) {
        signal(1, "/", [.objectPath(path), .strings(names)])
    }

    mutating func propertiesChanged(_ path: ObjectPath, _ name: String, _ changed: [String: DBusValue], invalidated: [String] = []) {
        signal(2, path, BlueZSamples.propertiesChanged(name, changed, invalidated: invalidated))
    }

    mutating func snapshot(_ value: DBusValue) {
        writer.output.byte(3)
        writer.typedValue(value)
    }
}

/// Start-up, a dongle found and connected, notifications, a drop, bluetoothd restarting.
func seeds() -> [(name: String, bytes: [UInt8])] {
    typealias S = BlueZSamples
    var startup = SeedWriter()
    startup.snapshot(S.managedObjects)

    var connect = SeedWriter()
    connect.interfacesAdded(S.adapterPath, "org.bluez.Adapter1", S.adapter)
    connect.interfacesAdded(S.devicePath, "org.bluez.Device1", S.device.filter { $0.key != "Connected" && $0.key != "ServicesResolved" })
    connect.propertiesChanged(S.devicePath, "org.bluez.Device1", ["Connected": .boolean(true)])
    connect.interfacesAdded(S.servicePath, "org.bluez.GattService1", S.service)
    connect.interfacesAdded(S.txPath, "org.bluez.GattCharacteristic1", S.tx)
    connect.interfacesAdded(S.rxPath, "org.bluez.GattCharacteristic1", S.rx)
    connect.propertiesChanged(S.devicePath, "org.bluez.Device1", ["ServicesResolved": .boolean(true)])
    connect.propertiesChanged(S.txPath, "org.bluez.GattCharacteristic1", ["Notifying": .boolean(true)])
    connect.propertiesChanged(S.txPath, "org.bluez.GattCharacteristic1", ["Value": .bytes([0x0a, 0x0b, 0x0c])])

    var drop = SeedWriter()
    drop.snapshot(S.managedObjects)
    drop.propertiesChanged(S.txPath, "org.bluez.GattCharacteristic1", ["Value": .bytes([0x01])])
    drop.propertiesChanged(S.devicePath, "org.bluez.Device1", ["Connected": .boolean(false), "ServicesResolved": .boolean(false)], invalidated: ["RSSI"])
    drop.interfacesRemoved(S.txPath, ["org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.bluez.GattCharacteristic1"])
    drop.interfacesRemoved(S.rxPath, ["org.bluez.GattCharacteristic1"])
    drop.interfacesRemoved(S.servicePath, ["org.bluez.GattService1"])
    drop.propertiesChanged(S.devicePath, "org.bluez.Device1", ["RSSI": .int16(-80), "ManufacturerData": S.device["ManufacturerData"] ?? .bytes([])])

    var restart = SeedWriter()
    restart.snapshot(S.managedObjects)
    restart.propertiesChanged(S.adapterPath, "org.bluez.Adapter1", ["Powered": .boolean(false), "Discovering": .boolean(false)])
    restart.interfacesRemoved(S.adapterPath, ["org.bluez.Adapter1"])
    restart.snapshot(.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), []))
    restart.interfacesAdded(S.adapterPath, "org.bluez.Adapter1", S.adapter)
    restart.writer.output.byte(4)  // NameOwnerChanged, which the tree does not handle
    restart.writer.path("/org/freedesktop/DBus")
    restart.writer.output.byte(0)
    restart.writer.output.byte(3)
    restart.writer.output.byte(3)
    [DBusValue.string("org.bluez"), .string(":1.4"), .string("")].forEach { restart.writer.typedValue($0) }

    return [
        ("startup-snapshot", startup.writer.output.bytes),
        ("connect-and-notify", connect.writer.output.bytes),
        ("link-drop", drop.writer.output.bytes),
        ("bluetoothd-restart", restart.writer.output.bytes),
    ]
}
