import BlueZ
import DBus

/// Which devices' property changes the daemon hears.
///
/// While a filtered discovery runs, bluetoothd sends one PropertiesChanged
/// (RSSI, ManufacturerData) per advertisement of every device in range: in
/// a busy street hundreds a second, each a wake-up, a decode and a look at
/// the tree. Once the dongle's address (`dongle.address`, or the binding)
/// and its adapter are known, its object's path is too, and nothing another
/// device says can change what Tether does, except as evidence that the
/// controller hears the air (`Supervisor.controllerEvidence`, the scan-stall
/// watch). So `BlueZMonitor` then listens to that path alone, and LinkService
/// samples the others: let in until one advertises, then shut out until the
/// next `othersAdvertisingEvery` is due. Until the address is known (a config
/// by name or service, not bound yet) every device is heard: any may be the
/// dongle. InterfacesAdded and InterfacesRemoved are heard from all.
///
/// The dongle's path is its object's, once resolved: after pairing BlueZ
/// moves the object's Address to the identity address and keeps its path
/// (`DongleIdentity`), so a path made from the address would miss it. Its
/// DFU bootloader's path (the address plus one) is watched beside it.
enum DeviceScope {
    /// The paths `BlueZMonitor.watchDevices(at:)` gets: nil while every
    /// device may be the dongle.
    static func watchedPaths(address: String?, adapter: ObjectPath?, resolved: Device?) -> [ObjectPath]? {
        guard let address, let adapter else { return nil }
        let dongle = resolved.flatMap { $0.address == address ? $0.path : nil } ?? Device.path(adapter: adapter, address: address)
        guard let dongle else { return nil }
        var paths = [dongle]
        if let bootloader = DongleIdentity.bootloaderAddress(of: address).flatMap({ Device.path(adapter: adapter, address: $0) }) {
            paths.append(bootloader)
        }
        return paths
    }
}
