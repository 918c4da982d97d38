import BlueZ
import Configuration
import DBus
import HCI
import LinkSupervisor

/// Finds, in bluetoothd's object tree, the adapter, the dongle and the
/// characteristics the config asks for, and sums them up as the
/// supervisor's `LinkObservation`.
struct LinkResolver: Sendable {
    struct Resolution: Sendable, Equatable {
        var adapter: Adapter?
        var device: Device?
        var notify: [GattCharacteristic] = []
        var keepalive: GattCharacteristic?
        var observation = LinkObservation()
        /// The adapter that would have been taken but is on a placeholder
        /// address (`PlaceholderAddress`), not its own yet: set aside.
        var placeholder: Adapter?
    }

    let config: TetherConfig

    /// - Parameter lastAddress: the address of the controller used last:
    ///   with no adapter configured, it is found again by it, whatever its
    ///   index now (a USB reset or replug renumbers it).
    /// - Parameter known: the address the dongle is known by when it is not
    ///   `dongle.address`: the one this gateway is bound to (`DongleBinding`)
    ///   for a config that finds it by name or service, or the identity
    ///   address BlueZ moved the configured or bound one to after pairing
    ///   (`DongleIdentity`). Only that device is taken, however strong the
    ///   others that match.
    func resolve(_ tree: ObjectTree, bluezPresent: Bool, lastAddress: String? = nil, known: String? = nil) -> Resolution {
        var result = Resolution()
        result.observation.bluezPresent = bluezPresent
        guard bluezPresent else { return result }
        let (picked, placeholder) = pickAdapter(tree, lastAddress: lastAddress)
        result.placeholder = placeholder
        guard let adapter = picked else { return result }
        result.adapter = adapter
        result.observation.adapterPresent = true
        result.observation.adapterPowered = adapter.powered
        guard let device = pickDevice(tree, adapter: adapter, known: known) else { return result }
        result.device = device
        result.observation.devicePresent = true
        result.observation.deviceBonded = device.bonded
        // BlueZ clears ServicesResolved whenever the link goes, so a resolved
        // device is connected even when its Connected property says no:
        // bluetoothd 5.66 skips the Connected=true signal when the ATT
        // channel comes up before the kernel's Device Connected event ("is
        // already connected" in its log), seen in the e2e tests.
        result.observation.connected = device.connected || device.servicesResolved
        result.observation.servicesResolved = device.servicesResolved

        let characteristics = tree.characteristics(of: device.path)
        result.notify = config.dongle.notify.compactMap { uuid in
            pick(uuid, among: characteristics, role: { $0.canNotify })
        }
        var ready = result.notify.count == config.dongle.notify.count
        if config.keepalive.enabled {
            let wantsWrite = config.keepalive.write != nil
            result.keepalive = pick(config.keepalive.characteristic, among: characteristics) {
                wantsWrite ? ($0.canWriteCommand || $0.canWriteRequest) : $0.canRead
            }
            ready = ready && result.keepalive != nil
        }
        result.observation.characteristicsReady = ready
        if device.servicesResolved, !ready {
            result.observation.gattProblem = problem(result, characteristics: characteristics)
        }
        return result
    }

    /// "not found on the dongle: 6e400003-… (notify); it exposes 6e400002-…, 2a19".
    private func problem(_ result: Resolution, characteristics: [GattCharacteristic]) -> String {
        var missing = config.dongle.notify.filter { uuid in !result.notify.contains { $0.uuid == uuid } }.map { "\($0) (notify)" }
        if config.keepalive.enabled, result.keepalive == nil {
            missing.append("\(config.keepalive.characteristic) (keep-alive)")
        }
        var exposed: [String] = []
        for characteristic in characteristics where !exposed.contains(characteristic.uuid) { exposed.append(characteristic.uuid) }
        let has = exposed.isEmpty ? "it exposes no characteristic yet" : "it exposes \(exposed.joined(separator: ", "))"
        return "not found on the dongle: \(missing.joined(separator: ", ")); \(has)"
    }

    /// The adapter to use, and the one set aside for being on a
    /// placeholder address when there is no other: a controller that came
    /// up before it was given its address (the Raspberry Pi's onboard radio
    /// now and then) has none of the pairings BlueZ keeps under its real
    /// one, and would give the dongle a central address it never paired
    /// with. Tether waits for the real address, whichever way the config
    /// names the adapter.
    private func pickAdapter(_ tree: ObjectTree, lastAddress: String?) -> (Adapter?, placeholder: Adapter?) {
        let adapters = tree.adapters
        let usable = adapters.filter { PlaceholderAddress.kind(of: $0.address) == nil }
        let onPlaceholder = adapters.filter { PlaceholderAddress.kind(of: $0.address) != nil }
        if let address = config.bluez.adapterAddress {
            let picked = usable.first { $0.address.uppercased() == address }
            return (picked, picked == nil ? onPlaceholder.first : nil)
        }
        if let name = config.bluez.adapter {
            return (usable.first { $0.interfaceName == name }, onPlaceholder.first { $0.interfaceName == name })
        }
        if let lastAddress, let same = usable.first(where: { $0.address.uppercased() == lastAddress }) {
            return (same, nil)
        }
        let picked = usable.first { $0.powered } ?? usable.first
        return (picked, picked == nil ? onPlaceholder.first : nil)
    }

    private func pickDevice(_ tree: ObjectTree, adapter: Adapter, known: String?) -> Device? {
        // BlueZ spells addresses upper-case, as the config and the binding
        // are normalised: looked up by address in the tree's index (this
        // runs on every change of the tree that may matter, among hundreds
        // of devices in a busy street).
        if let address = known ?? config.dongle.address {
            return tree.devices(address: address).first { $0.adapter == nil || $0.adapter == adapter.path }
        }
        let candidates = tree.devices.filter { $0.adapter == nil || $0.adapter == adapter.path }
        // A connected match first, then the strongest signal.
        return matching(candidates).max { a, b in
            if a.connected != b.connected { return !a.connected }
            return (a.rssi ?? Int.min) < (b.rssi ?? Int.min)
        }
    }

    /// Whether `device` could be the one `resolve` picks: the known or
    /// configured address, else a match of name and service. One object, not
    /// the tree (an advertisement of a stranger in a busy street is let go).
    func mayBeTheDongle(_ device: Device, known: String?) -> Bool {
        if let address = known ?? config.dongle.address { return device.address == address }
        return !matching([device]).isEmpty
    }

    /// The devices on `adapter` that fit `dongle.name_prefix` and
    /// `dongle.service_uuid` (none when the config gives an address).
    func matchingDevices(_ tree: ObjectTree, adapter: Adapter) -> [Device] {
        guard config.dongle.address == nil else { return [] }
        return matching(tree.devices.filter { $0.adapter == nil || $0.adapter == adapter.path })
    }

    private func matching(_ candidates: [Device]) -> [Device] {
        candidates.filter { device in
            if let prefix = config.dongle.namePrefix {
                guard (device.name ?? device.alias ?? "").hasPrefix(prefix) else { return false }
            }
            if let uuid = config.dongle.serviceUUID {
                guard device.uuids.contains(uuid) else { return false }
            }
            return true
        }
    }

    /// How the config finds the dongle, for the log: `name_prefix "Tether"`.
    var matchDescription: String {
        var parts: [String] = []
        if let prefix = config.dongle.namePrefix { parts.append("name_prefix \"\(prefix)\"") }
        if let uuid = config.dongle.serviceUUID { parts.append("service_uuid \(uuid)") }
        return parts.joined(separator: " and ")
    }

    /// The characteristic with `uuid`. Older Nordic documents swap the names of
    /// the NUS RX and TX characteristics, so when the configured one cannot
    /// play its role but its NUS sibling can, the sibling is used. A
    /// characteristic that cannot play its role is never returned: until the
    /// right one is exported, the link is not ready.
    private func pick(
        _ uuid: String, among characteristics: [GattCharacteristic], role: (GattCharacteristic) -> Bool
    ) -> GattCharacteristic? {
        let named = characteristics.first { $0.uuid == uuid }
        if let named, role(named) { return named }
        let siblings = [ConfigUUID.nusRX: ConfigUUID.nusTX, ConfigUUID.nusTX: ConfigUUID.nusRX]
        if let sibling = siblings[uuid], let other = characteristics.first(where: { $0.uuid == sibling }), role(other) {
            return other
        }
        return nil
    }
}
