import BlueZ
import DBus

/// The dongle's GATT database as bluetoothd exports it after service
/// discovery: the Nordic UART Service and the Battery Service, under object
/// paths named by ATT handle (`service000a/char000b/desc000f`, four lowercase
/// hex digits), which clients use to derive the device and the handle.
struct GattDatabase: Sendable {
    enum KnownUUID {
        static let nusService = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"
        static let nusRX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
        static let nusTX = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
        static let batteryService = "0000180f-0000-1000-8000-00805f9b34fb"
        static let batteryLevel = "00002a19-0000-1000-8000-00805f9b34fb"
        /// Nordic's Secure DFU service and its control point.
        static let dfuService = "0000fe59-0000-1000-8000-00805f9b34fb"
        static let dfuControlPoint = "8ec90001-f315-4f60-9fb8-838830daea50"
        static let clientCharacteristicConfiguration = "00002902-0000-1000-8000-00805f9b34fb"
    }

    struct Descriptor: Sendable {
        let path: ObjectPath
        let characteristicPath: ObjectPath
        let uuid: String
    }

    struct Characteristic: Sendable {
        let path: ObjectPath
        let servicePath: ObjectPath
        let uuid: String
        let flags: [String]
        let descriptors: [Descriptor]

        var isReadable: Bool { flags.contains("read") }
        var isNotifiable: Bool { flags.contains("notify") || flags.contains("indicate") }
        var acceptsWriteRequest: Bool { flags.contains("write") }
        var acceptsWriteCommand: Bool { flags.contains("write-without-response") }
    }

    struct Service: Sendable {
        let path: ObjectPath
        let uuid: String
        let characteristics: [Characteristic]
    }

    /// The ATT MTU the dongle negotiates (Nordic's default maximum).
    static let mtu: UInt16 = 247

    let services: [Service]
    /// NUS RX: the central writes here.
    let rx: Characteristic
    /// NUS TX: telemetry notifications.
    let tx: Characteristic
    let batteryLevel: Characteristic

    /// Which firmware's layout: 0 as shipped; 1 after an update that put
    /// the Secure DFU service first, so every later handle (and object
    /// path) moved by four.
    let layout: Int

    init(devicePath: ObjectPath, layout: Int = 0) throws {
        self.layout = layout
        func element(_ prefix: String, _ handle: UInt16) -> String {
            let hex = String(handle, radix: 16)
            return prefix + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        }
        func child(_ parent: ObjectPath, _ prefix: String, _ handle: UInt16) throws -> ObjectPath {
            guard let path = parent.appending(element(prefix, handle)) else {
                throw SimulatorError.invalidPath(parent.rawValue + "/" + element(prefix, handle))
            }
            return path
        }
        func characteristic(
            _ service: ObjectPath, _ handle: UInt16, _ uuid: String, _ flags: [String], ccc: UInt16? = nil
        ) throws -> Characteristic {
            let path = try child(service, "char", handle)
            let descriptors = try ccc.map {
                [Descriptor(path: try child(path, "desc", $0), characteristicPath: path, uuid: KnownUUID.clientCharacteristicConfiguration)]
            } ?? []
            return Characteristic(path: path, servicePath: service, uuid: uuid, flags: flags, descriptors: descriptors)
        }
        // Handles as a Nordic NUS peripheral lays them out: the characteristic
        // declaration handle names the object (its value handle follows it).
        var first: [Service] = []
        var base: UInt16 = 0x000a
        if layout != 0 {
            let dfu = try child(devicePath, "service", base)
            let controlPoint = try characteristic(dfu, base + 1, KnownUUID.dfuControlPoint, ["write", "indicate"], ccc: base + 3)
            first = [Service(path: dfu, uuid: KnownUUID.dfuService, characteristics: [controlPoint])]
            base += 4
        }
        let nus = try child(devicePath, "service", base)
        rx = try characteristic(nus, base + 1, KnownUUID.nusRX, ["write", "write-without-response"])
        tx = try characteristic(nus, base + 3, KnownUUID.nusTX, ["notify"], ccc: base + 5)
        let battery = try child(devicePath, "service", base + 6)
        batteryLevel = try characteristic(battery, base + 7, KnownUUID.batteryLevel, ["read", "notify"], ccc: base + 9)
        services = first + [
            Service(path: nus, uuid: KnownUUID.nusService, characteristics: [rx, tx]),
            Service(path: battery, uuid: KnownUUID.batteryService, characteristics: [batteryLevel]),
        ]
    }

    var characteristics: [Characteristic] { services.flatMap(\.characteristics) }

    func characteristic(at path: ObjectPath) -> Characteristic? {
        characteristics.first { $0.path == path }
    }

    /// The order in which bluetoothd exports the objects: each service, then
    /// each of its characteristics followed by the characteristic's descriptors.
    var exportOrder: [ObjectPath] {
        services.flatMap { service in
            [service.path] + service.characteristics.flatMap { [$0.path] + $0.descriptors.map(\.path) }
        }
    }

    /// The order in which bluetoothd removes them (gatt-client.c
    /// unregister_service): descriptors, then characteristics, then the service.
    var removalOrder: [ObjectPath] {
        services.flatMap { service in
            service.characteristics.flatMap { $0.descriptors.map(\.path) + [$0.path] } + [service.path]
        }
    }
}
