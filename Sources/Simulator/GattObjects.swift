import BlueZ
import DBus

/// The D-Bus face of the GATT database: GattService1, GattCharacteristic1 and
/// GattDescriptor1 interfaces whose methods call into the simulator.
extension GattDatabase {
    /// Every GATT object in export order, ready for `Bus.export`.
    /// - Parameter notifying: characteristics that start with Notifying=true
    ///   (their notify sessions survived a link loss).
    func exportedObjects(
        devicePath: ObjectPath, simulator: Simulator, notifying: Set<ObjectPath>
    ) -> [(ObjectPath, [ExportedInterface])] {
        var objects: [(ObjectPath, [ExportedInterface])] = []
        for service in services {
            objects.append((service.path, [Self.serviceInterface(service, devicePath: devicePath)]))
            for characteristic in service.characteristics {
                objects.append((
                    characteristic.path,
                    [Self.characteristicInterface(characteristic, simulator: simulator, notifying: notifying.contains(characteristic.path))]
                ))
                for descriptor in characteristic.descriptors {
                    objects.append((
                        descriptor.path,
                        [Self.descriptorInterface(descriptor, simulator: simulator, notifying: notifying.contains(characteristic.path))]
                    ))
                }
            }
        }
        return objects
    }

    static func serviceInterface(_ service: Service, devicePath: ObjectPath) -> ExportedInterface {
        ExportedInterface(name: BlueZ.gattServiceInterface, properties: [
            "UUID": .string(service.uuid),
            "Device": .objectPath(devicePath),
            "Primary": .boolean(true),
            "Includes": .array(element: .objectPath, []),
        ])
    }

    static func characteristicInterface(
        _ characteristic: Characteristic, simulator: Simulator, notifying: Bool
    ) -> ExportedInterface {
        var properties: [String: DBusValue] = [
            "UUID": .string(characteristic.uuid),
            "Service": .objectPath(characteristic.servicePath),
            "Value": .bytes([]),
            "Flags": .strings(characteristic.flags),
            "MTU": .uint16(mtu),
        ]
        // bluetoothd exports these only where they apply (their "exists" callbacks).
        if characteristic.isNotifiable {
            properties["Notifying"] = .boolean(notifying)
            properties["NotifyAcquired"] = .boolean(false)
        }
        if characteristic.acceptsWriteCommand {
            properties["WriteAcquired"] = .boolean(false)
        }
        return ExportedInterface(
            name: BlueZ.gattCharacteristicInterface,
            methods: [
                "ReadValue": .init(in: "a{sv}", out: "ay") { call in
                    let options = try call.argument(0).stringKeyedDictionary ?? [:]
                    let value = try await simulator.readCharacteristic(characteristic, client: call.sender, options: options)
                    return [.bytes(value)]
                },
                "WriteValue": .init(in: "aya{sv}") { call in
                    guard let value = try call.argument(0).bytes else { throw BlueZFault.invalidArguments() }
                    let options = try call.argument(1).stringKeyedDictionary ?? [:]
                    try await simulator.writeCharacteristic(
                        characteristic, value: value, client: call.sender, options: options,
                        noReply: call.message.noReplyExpected
                    )
                    return []
                },
                "StartNotify": .init { call in
                    try await simulator.startNotify(characteristic, client: call.sender)
                    return []
                },
                "AcquireNotify": .init(in: "a{sv}", out: "hq") { call in
                    try await simulator.acquireNotify(characteristic, client: call.sender)
                },
                "StopNotify": .init { call in
                    try await simulator.stopNotify(characteristic, client: call.sender)
                    return []
                },
            ],
            properties: properties
        )
    }

    static func descriptorInterface(_ descriptor: Descriptor, simulator: Simulator, notifying: Bool) -> ExportedInterface {
        ExportedInterface(
            name: BlueZ.gattDescriptorInterface,
            methods: [
                "ReadValue": .init(in: "a{sv}", out: "ay") { _ in
                    [.bytes(try await simulator.readDescriptor(descriptor))]
                },
                // bluetoothd owns the CCC: clients must use StartNotify instead.
                "WriteValue": .init(in: "aya{sv}") { _ in
                    throw BlueZFault.notPermitted("Write not permitted")
                },
            ],
            properties: [
                "UUID": .string(descriptor.uuid),
                "Characteristic": .objectPath(descriptor.characteristicPath),
                "Value": .bytes(notifying ? [0x01, 0x00] : [0x00, 0x00]),
            ]
        )
    }
}
