import DBus

/// A mirror of bluetoothd's object tree: path → interface → properties.
///
/// Built from `GetManagedObjects` and kept current by applying
/// InterfacesAdded, InterfacesRemoved and PropertiesChanged in the order they
/// arrive. Property values are stored without their variant wrapper.
/// Characteristic `Value`s are not kept: they are readings, not state.
public struct ObjectTree: Sendable, Equatable {
    public typealias Properties = [String: DBusValue]
    public private(set) var objects: [ObjectPath: [String: Properties]] = [:]

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
        var object = objects[path] ?? [:]
        for (name, properties) in byInterface where name.hasPrefix("org.bluez.") {
            guard let dictionary = properties.stringKeyedDictionary else {
                throw BlueZError.malformed("properties of \(name) on \(path) are not a{sv}")
            }
            var values = object[name] ?? [:]
            for (key, value) in dictionary where key != "Value" { values[key] = value.unwrapped }
            object[name] = values
        }
        if !object.isEmpty { objects[path] = object }
    }

    /// Applies InterfacesRemoved(o, as).
    public mutating func removeInterfaces(_ path: ObjectPath, _ names: [String]) {
        guard var object = objects[path] else { return }
        for name in names { object.removeValue(forKey: name) }
        objects[path] = object.isEmpty ? nil : object
    }

    /// Applies PropertiesChanged; changes for objects or interfaces the tree
    /// does not know are ignored (they may belong to an object removed meanwhile).
    public mutating func changeProperties(
        _ path: ObjectPath, interface: String, changed: Properties, invalidated: [String]
    ) {
        guard objects[path]?[interface] != nil else { return }
        for (key, value) in changed where key != "Value" { objects[path]?[interface]?[key] = value.unwrapped }
        for key in invalidated { objects[path]?[interface]?.removeValue(forKey: key) }
    }

    public func properties(_ path: ObjectPath, _ interface: String) -> Properties? { objects[path]?[interface] }

    // MARK: Typed views

    public var adapters: [Adapter] {
        objects.keys.sorted().compactMap { path in properties(path, BlueZ.adapterInterface).map { Adapter(path: path, $0) } }
    }

    public func adapter(_ path: ObjectPath) -> Adapter? {
        properties(path, BlueZ.adapterInterface).map { Adapter(path: path, $0) }
    }

    public var devices: [Device] {
        objects.keys.sorted().compactMap { path in properties(path, BlueZ.deviceInterface).map { Device(path: path, $0) } }
    }

    public func device(_ path: ObjectPath) -> Device? {
        properties(path, BlueZ.deviceInterface).map { Device(path: path, $0) }
    }

    /// Every characteristic exported below `device`.
    public func characteristics(of device: ObjectPath) -> [GattCharacteristic] {
        objects.keys.filter { $0 != device && $0.isDescendant(of: device) }.sorted().compactMap { path in
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
