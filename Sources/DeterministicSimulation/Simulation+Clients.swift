import BlueZ
import ControlAPI
import DBus

/// The other clients of the system bus: an operator running `tether
/// reconnect`, and a local user who forges signals (anyone may send signals
/// on Debian's system bus, and a signal with a destination reaches it
/// whatever its match rules). Both connect to the bus like any process.
extension Simulation {
    /// The first sequence number of forged notifications: far above any the
    /// dongle reaches in a run, so the audit knows one in the log for forged.
    static let forgedSequenceBase: UInt32 = 0xF000_0000

    /// `tether reconnect`: the control API's Reconnect, as the CLI calls it.
    func requestReconnect() async {
        do {
            let bus = try await Bus.connect(to: busDaemon, on: worldLoop)
            let attempt = try await ControlClient(bus: bus, address: ControlAddress(instance: .default)).reconnect()
            record(.world("tether reconnect: attempt \(attempt)"))
            await bus.close()
        } catch {
            record(.world("tether reconnect: \(error)"))
        }
    }

    /// Forged signals, each sent to Tether's connection and broadcast:
    /// bluetoothd leaving the bus, a notification on every characteristic
    /// bluetoothd exports (with a sequence number the dongle never sends),
    /// the dongle's link dropping. None may reach the log or move Tether.
    func forge() async {
        guard let bus = try? await Bus.connect(to: busDaemon, on: worldLoop) else { return }
        let victim = tether?.uniqueName
        let owner = try? await bus.nameOwner(of: BlueZ.service)
        var characteristics: [ObjectPath] = []
        var devices: [ObjectPath] = []
        do {
            let reply = try await bus.call(
                destination: BlueZ.service, path: .root, interface: StandardInterface.objectManager, method: "GetManagedObjects")
            let tree = try ObjectTree(managedObjects: reply.first ?? .strings([]))
            devices = tree.devices.map(\.path)
            characteristics = devices.flatMap { tree.characteristics(of: $0).map(\.path) }
        } catch {
            record(.world("forging: bluetoothd's tree could not be read (\(error)); forging without it"))
        }
        var forged = Self.forgedSequenceBase &+ UInt32(checker.forgedSent)
        for destination in [victim, nil] {
            try? await bus.emit(
                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                [.string(BlueZ.service), .string(owner ?? ""), .string("")], destination: destination)
            for path in characteristics {
                var payload: [UInt8] = []
                withUnsafeBytes(of: forged.littleEndian) { payload.append(contentsOf: $0) }
                payload += [0, 0, 0, 0]
                forged &+= 1
                try? await bus.emit(
                    path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
                    [.string(BlueZ.gattCharacteristicInterface), .vardict(["Value": .bytes(payload)]), .strings([])],
                    destination: destination)
            }
            for path in devices {
                try? await bus.emit(
                    path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
                    [.string(BlueZ.deviceInterface), .vardict(["Connected": .boolean(false)]), .strings([])],
                    destination: destination)
            }
        }
        await bus.close()
        checker.forgedSent = Int(forged &- Self.forgedSequenceBase)
        record(.world("forged signals sent (to \(victim ?? "nobody") and broadcast)"))
    }
}
