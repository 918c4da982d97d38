import BlueZ
import DBus

/// Other devices on the same air: a busy street, a parking lot, another
/// vehicle's dongle. While discovery runs, bluetoothd makes a Device1 object
/// for each one a session's filter accepts (InterfacesAdded with its RSSI)
/// and then reports its advertisements as RSSI changes; nothing else happens
/// to them. They are what shows a waiting Tether that the controller hears
/// the air while its own dongle is away.
///
/// Addresses are `0A:00:00:00:HH:LL` (HHLL the advertiser's number), names
/// `Other-N`; none offers the dongle's services. Each is reported about once
/// per `otherAdvertisingInterval`: every scan tick reports the next slice,
/// round robin.
extension Simulator {
    /// Sets how many other advertisers are on the air (the
    /// `SetOtherAdvertisers` knob); objects already made stay, as
    /// bluetoothd keeps them until its temporary timeout.
    public func setOtherAdvertisers(_ count: Int) {
        otherAdvertisers = max(0, min(count, 0xFFFF))
        let count = otherAdvertisers
        log.record(.otherAdvertisers) { $0.reason = "\(count)" }
    }

    static func otherAddress(_ index: Int) -> String {
        let high = String(index >> 8, radix: 16, uppercase: true)
        let low = String(index & 0xFF, radix: 16, uppercase: true)
        return "0A:00:00:00:\(high.count < 2 ? "0" + high : high):\(low.count < 2 ? "0" + low : low)"
    }

    /// One scan tick's share of the other advertisers' reports, and the twin's.
    func reportOtherAdvertisers(on bus: Bus) async {
        await reportTwin(on: bus)
        await reportBootloader(on: bus)
        guard otherAdvertisers > 0 else { return }
        let ticksPerInterval = max(1, Int(options.otherAdvertisingInterval / options.advertisingInterval))
        let slice = max(1, (otherAdvertisers + ticksPerInterval - 1) / ticksPerInterval)
        for _ in 0..<min(slice, otherAdvertisers) {
            // Each report is awaited, and the knob may have emptied the air
            // meanwhile (a busy street that ends): nothing left to report.
            guard otherAdvertisers > 0 else { return }
            let index = othersCursor % otherAdvertisers
            othersCursor = (othersCursor + 1) % otherAdvertisers
            let address = Self.otherAddress(index)
            let name = "Other-\(index)"
            let rssi = Int16(-60 - (index % 35))
            guard discoveryReports(uuids: [], rssi: rssi, name: name, address: address),
                  let path = try? DeviceObject.path(adapter: adapterPath, address: address)
            else { continue }
            if othersExported.contains(index) {
                try? await bus.setProperties(path, BlueZ.deviceInterface, ["RSSI": .int16(rssi)])
            } else {
                othersExported.insert(index)
                try? await bus.export(path, [Self.otherInterface(address: address, name: name, rssi: rssi, adapter: adapterPath)])
            }
        }
    }

    /// The objects made for other advertisers under the current adapter,
    /// forgotten: when the controller leaves, bluetoothd removes every
    /// device object under its adapter, strangers' too, and a controller
    /// that comes back (as another hciN, or the same) starts with none; a
    /// new bluetoothd starts with none either (they lived in its memory).
    func forgetStrangers() -> [ObjectPath] {
        var paths = othersExported.sorted().compactMap { try? DeviceObject.path(adapter: adapterPath, address: Self.otherAddress($0)) }
        if twinExported, let address = options.twinAddress, let path = try? DeviceObject.path(adapter: adapterPath, address: address) {
            paths.append(path)
        }
        if bootloaderExported, let path = try? DeviceObject.path(adapter: adapterPath, address: Self.bootloaderAddress(of: options.address)) {
            paths.append(path)
        }
        othersExported.removeAll()
        twinExported = false
        bootloaderExported = false
        return paths
    }

    /// The identical dongle of another vehicle: the dongle's name and
    /// services, 15 dB stronger than the dongle's usual signal.
    private func reportTwin(on bus: Bus) async {
        guard let address = options.twinAddress, let path = try? DeviceObject.path(adapter: adapterPath, address: address) else { return }
        let rssi: Int16 = -40
        guard discoveryReports(uuids: DeviceObject.uuids, rssi: rssi, name: options.name, address: address) else { return }
        if twinExported {
            try? await bus.setProperties(path, BlueZ.deviceInterface, ["RSSI": .int16(rssi)])
            return
        }
        twinExported = true
        var interface = Self.otherInterface(address: address.uppercased(), name: options.name, rssi: rssi, adapter: adapterPath)
        interface.properties["UUIDs"] = .strings(DeviceObject.uuids)
        interface.methods["Connect"] = .init { [weak self] call in
            await self?.strangerConnectAsked(client: call.sender, reason: "twin")
            throw BlueZFault.abortByLocal
        }
        try? await bus.export(path, [interface])
    }

    /// A Connect to a device that is not the dongle (`reason`: twin, bootloader).
    private func strangerConnectAsked(client: String?, reason: String) {
        log.record(.connectRequest) {
            $0.client = client
            $0.reason = reason
        }
    }

    /// What lifts a stalled scan: a new scan enable (discovery stopped by
    /// every client and started again), or only a controller reset (a power
    /// cycle of the adapter).
    public enum ScanStall: String, Sendable {
        case untilRestart = "until-restart"
        case untilReset = "until-reset"
    }

    /// The scan stops delivering advertisements (nil: it delivers again),
    /// `Discovering` unchanged and nothing said on the bus, as BlueZ's LE
    /// scan does after hours or days in the field.
    public func stallScan(_ stall: ScanStall?) {
        guard let stall else { return endScanStall(reason: "control") }
        scanStall = stall
        log.record(.scanStall) {
            $0.on = true
            $0.reason = stall.rawValue
        }
    }

    func endScanStall(reason: String) {
        guard scanStall != nil else { return }
        scanStall = nil
        log.record(.scanStall) {
            $0.on = false
            $0.reason = reason
        }
    }

    /// Nordic's DFU bootloader takes the dongle's place (`true`): the
    /// dongle's application stops (a link drops) and `DfuTarg` advertises
    /// at the address with its last octet plus one; `false`: the updated
    /// application starts and advertises.
    public func setBootloader(_ on: Bool) async {
        guard on != bootloaderAdvertising, !stopped else { return }
        log.record(.bootloader) { $0.on = on }
        if on {
            bootloaderAdvertising = true
            await sleep()
        } else {
            bootloaderAdvertising = false
            await wake()
        }
    }

    /// The bootloader's address: the last octet plus one, wrapping
    /// (nRF5 SDK `nrf_dfu_ble`).
    static func bootloaderAddress(of address: String) -> String {
        var octets = address.uppercased().split(separator: ":").map(String.init)
        guard octets.count == 6, let last = UInt8(octets[5], radix: 16) else { return address }
        let next = String(last &+ 1, radix: 16, uppercase: true)
        octets[5] = next.count < 2 ? "0" + next : next
        return octets.joined(separator: ":")
    }

    /// Nordic's Secure DFU service, 0xFE59.
    static let dfuService = "0000fe59-0000-1000-8000-00805f9b34fb"

    private func reportBootloader(on bus: Bus) async {
        guard bootloaderAdvertising else { return }
        let address = Self.bootloaderAddress(of: options.address)
        guard let path = try? DeviceObject.path(adapter: adapterPath, address: address) else { return }
        let rssi: Int16 = -55
        guard discoveryReports(uuids: [Self.dfuService], rssi: rssi, name: "DfuTarg", address: address) else { return }
        if bootloaderExported {
            try? await bus.setProperties(path, BlueZ.deviceInterface, ["RSSI": .int16(rssi)])
            return
        }
        bootloaderExported = true
        var interface = Self.otherInterface(address: address, name: "DfuTarg", rssi: rssi, adapter: adapterPath)
        interface.properties["UUIDs"] = .strings([Self.dfuService])
        interface.methods["Connect"] = .init { [weak self] call in
            await self?.strangerConnectAsked(client: call.sender, reason: "bootloader")
            throw BlueZFault.abortByLocal
        }
        try? await bus.export(path, [interface])
    }

    /// A stranger's Device1: Tether has no business connecting to it, and a
    /// Connect finds nobody (it would be a bug to ask).
    static func otherInterface(address: String, name: String, rssi: Int16, adapter: ObjectPath) -> ExportedInterface {
        ExportedInterface(
            name: BlueZ.deviceInterface,
            methods: [
                "Connect": .init { _ in throw BlueZFault.abortByLocal },
                "Disconnect": .init { _ in [] },
            ],
            properties: [
                "Address": .string(address),
                "AddressType": .string("random"),
                "Name": .string(name),
                "Alias": .string(name),
                "Paired": .boolean(false),
                "Bonded": .boolean(false),
                "Trusted": .boolean(false),
                "Blocked": .boolean(false),
                "LegacyPairing": .boolean(false),
                "Connected": .boolean(false),
                "ServicesResolved": .boolean(false),
                "UUIDs": .strings([]),
                "Adapter": .objectPath(adapter),
                "RSSI": .int16(rssi),
            ]
        )
    }
}
