import DBus

/// A mirror of bluetoothd's object tree: path → interface → properties.
///
/// Built from `GetManagedObjects` and kept current by applying
/// InterfacesAdded, InterfacesRemoved and PropertiesChanged in the order they
/// arrive. Property values are stored without their variant wrapper.
/// Characteristic `Value`s are not kept: they are readings, not state.
///
/// Indexed by role so that a look-up costs what it finds, not the tree: in
/// a busy street the tree holds hundreds of devices, and the daemon looks
/// for its adapter, its dongle and the dongle's characteristics after
/// every change that may matter.
///
/// Invariants (kept by the three mutating functions, checked against a
/// scan of every object by `ObjectTreeIndexTests`):
/// - `adapterPaths`, `devicePaths` and `characteristicPaths` are sorted and
///   hold exactly the paths whose object has `Adapter1`, `Device1` and
///   `GattCharacteristic1`;
/// - `devicePathsByAddress[A]` holds, sorted, exactly the device paths whose
///   `Address` upper-cased is `A`.
public struct ObjectTree: Sendable, Equatable {
    public typealias Properties = [String: DBusValue]
    public private(set) var objects: [ObjectPath: [String: Properties]] = [:]
    private var adapterPaths: [ObjectPath] = []
    private var devicePaths: [ObjectPath] = []
    private var characteristicPaths: [ObjectPath] = []
    private var devicePathsByAddress: [String: [ObjectPath]] = [:]

    public init() {}

    /// Parses a `GetManagedObjects` reply (`a{oa{sa{sv}}}`).
    public init(managedObjects: DBusValue) throws(BlueZError) {
        guard let byPath = managedObjects.objectPathKeyedDictionary else {
            throw BlueZError.malformed("GetManagedObjects reply is not a{oa{sa{sv}}}")
        }
        for (path, interfaces) in byPath {
            try addInterfaces(path, interfaces)
        }
    }

    /// Applies InterfacesAdded(o, a{sa{sv}}); an object already known keeps
    /// its other interfaces.
    public mutating func addInterfaces(_ path: ObjectPath, _ interfaces: DBusValue) throws(BlueZError) {
        guard let byInterface = interfaces.stringKeyedDictionary else {
            throw BlueZError.malformed("interfaces of \(path) are not a{sa{sv}}")
        }
        // Every interface is parsed before any is kept: a malformed one
        // leaves the tree as it was.
        var parsed: [(String, [String: DBusValue])] = []
        for (name, properties) in byInterface where name.hasPrefix("org.bluez.") {
            guard let dictionary = properties.stringKeyedDictionary else {
                throw BlueZError.malformed("properties of \(name) on \(path) are not a{sv}")
            }
            parsed.append((name, dictionary))
        }
        guard !parsed.isEmpty else { return }
        let before = objects[path]
        var object = before ?? [:]
        for (name, dictionary) in parsed {
            var values = object[name] ?? [:]
            for (key, value) in dictionary where key != "Value" { values[key] = value.unwrapped }
            object[name] = values
        }
        objects[path] = object
        reindex(path, before: before, after: object)
    }

    /// Applies InterfacesRemoved(o, as).
    public mutating func removeInterfaces(_ path: ObjectPath, _ names: [String]) {
        guard let before = objects[path] else { return }
        var object = before
        for name in names { object.removeValue(forKey: name) }
        objects[path] = object.isEmpty ? nil : object
        reindex(path, before: before, after: object)
    }

    /// Applies PropertiesChanged; changes for objects or interfaces the tree
    /// does not know are ignored (they may belong to an object removed meanwhile).
    public mutating func changeProperties(
        _ path: ObjectPath, interface: String, changed: Properties, invalidated: [String]
    ) {
        guard let before = objects[path], before[interface] != nil else { return }
        for (key, value) in changed where key != "Value" { objects[path]?[interface]?[key] = value.unwrapped }
        for key in invalidated { objects[path]?[interface]?.removeValue(forKey: key) }
        if interface == BlueZ.deviceInterface, changed["Address"] != nil || invalidated.contains("Address") {
            reindex(path, before: before, after: objects[path] ?? [:])
        }
    }

    // MARK: Index

    /// Brings the indexes up to date with one object's change.
    private mutating func reindex(_ path: ObjectPath, before: [String: Properties]?, after: [String: Properties]) {
        Self.update(&adapterPaths, path, was: before?[BlueZ.adapterInterface] != nil, is: after[BlueZ.adapterInterface] != nil)
        Self.update(&devicePaths, path, was: before?[BlueZ.deviceInterface] != nil, is: after[BlueZ.deviceInterface] != nil)
        Self.update(
            &characteristicPaths, path,
            was: before?[BlueZ.gattCharacteristicInterface] != nil, is: after[BlueZ.gattCharacteristicInterface] != nil)
        let oldAddress = before?[BlueZ.deviceInterface].map(Self.indexedAddress)
        let newAddress = after[BlueZ.deviceInterface].map(Self.indexedAddress)
        guard oldAddress != newAddress else { return }
        if let oldAddress {
            Self.update(&devicePathsByAddress[oldAddress, default: []], path, was: true, is: false)
            if devicePathsByAddress[oldAddress]?.isEmpty == true { devicePathsByAddress[oldAddress] = nil }
        }
        if let newAddress { Self.update(&devicePathsByAddress[newAddress, default: []], path, was: false, is: true) }
    }

    /// The address a device is indexed by: as `Device.address` reads it.
    private static func indexedAddress(_ properties: Properties) -> String {
        properties["Address"]?.string?.uppercased() ?? ""
    }

    /// Inserts `path` into, or removes it from, a sorted array.
    private static func update(_ paths: inout [ObjectPath], _ path: ObjectPath, was: Bool, is now: Bool) {
        guard was != now else { return }
        let index = insertionIndex(of: path, in: paths)
        if now {
            if index == paths.endIndex || paths[index] != path { paths.insert(path, at: index) }
        } else if index < paths.endIndex, paths[index] == path {
            paths.remove(at: index)
        }
    }

    /// The first index whose path is not below `path` (binary search).
    private static func insertionIndex(of path: ObjectPath, in paths: [ObjectPath]) -> Int {
        var low = 0
        var high = paths.count
        while low < high {
            let middle = (low + high) / 2
            if paths[middle] < path { low = middle + 1 } else { high = middle }
        }
        return low
    }

    public func properties(_ path: ObjectPath, _ interface: String) -> Properties? { objects[path]?[interface] }

    // MARK: Typed views

    public var adapters: [Adapter] {
        adapterPaths.compactMap { path in properties(path, BlueZ.adapterInterface).map { Adapter(path: path, $0) } }
    }

    public func adapter(_ path: ObjectPath) -> Adapter? {
        properties(path, BlueZ.adapterInterface).map { Adapter(path: path, $0) }
    }

    public var devices: [Device] {
        devicePaths.compactMap { path in properties(path, BlueZ.deviceInterface).map { Device(path: path, $0) } }
    }

    /// The devices whose address is `address` (upper-case, as `Device`
    /// spells it), by path: one per adapter that knows it.
    public func devices(address: String) -> [Device] {
        (devicePathsByAddress[address] ?? []).compactMap { path in properties(path, BlueZ.deviceInterface).map { Device(path: path, $0) } }
    }

    public func device(_ path: ObjectPath) -> Device? {
        properties(path, BlueZ.deviceInterface).map { Device(path: path, $0) }
    }

    /// Every characteristic exported below `device`.
    public func characteristics(of device: ObjectPath) -> [GattCharacteristic] {
        characteristicPaths.filter { $0 != device && $0.isDescendant(of: device) }.compactMap { path in
            properties(path, BlueZ.gattCharacteristicInterface).map { GattCharacteristic(path: path, $0) }
        }
    }

    /// The characteristic with `uuid` below `device`. When several share the
    /// UUID, the first by path (lowest handle) wins.
    public func characteristic(uuid: String, of device: ObjectPath) -> GattCharacteristic? {
        let wanted = uuid.lowercased()
        return characteristics(of: device).first { $0.uuid == wanted }
    }
}
