import BlueZ
import DBus

/// Several bus operations in one hop onto the bus's executor. Besides being
/// cheaper, a batch cannot be interleaved with other traffic from the
/// simulator, so e.g. a burst of notifications stays contiguous.
extension Bus {
    func exportObjects(_ objects: [(ObjectPath, [ExportedInterface])]) throws(DBusError) {
        for (path, interfaces) in objects { try export(path, interfaces) }
    }

    /// Removes objects (one InterfacesRemoved each), skipping any already gone.
    func unexportObjects(_ paths: [ObjectPath]) {
        for path in paths { try? unexport(path) }
    }

    /// GATT notifications: one PropertiesChanged of Value per payload, sent
    /// even when the value repeats, as bluetoothd does. Returns how many went
    /// out before the object or the connection went away.
    func notifyValues(_ path: ObjectPath, interface: String, _ values: [[UInt8]]) -> Int {
        for (index, value) in values.enumerated() {
            do {
                try setProperties(path, interface, ["Value": .bytes(value)])
            } catch {
                return index  // the object is gone or the connection closed: the rest would fail too
            }
        }
        return values.count
    }

    /// The bus side of a link loss: Connected=false and ServicesResolved=false
    /// in one PropertiesChanged, then (BlueZ ≥ 5.83) `Device1.Disconnected`
    /// with its reason, then the GATT objects' removals, with no other
    /// simulator traffic in between.
    func announceLinkLoss(device: ObjectPath?, reason: (name: String, message: String)?, removing gattPaths: [ObjectPath]) {
        if let device {
            try? setProperties(
                device, BlueZ.deviceInterface,
                ["Connected": .boolean(false), "ServicesResolved": .boolean(false)]
            )
            if let reason {
                try? emit(
                    path: device, interface: BlueZ.deviceInterface, member: "Disconnected",
                    [.string(reason.name), .string(reason.message)]
                )
            }
        }
        unexportObjects(gattPaths)
    }
}
