import BlueZ
import Configuration
import DBus
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkCore
import TextColumns

/// A dongle found by `tether scan`.
public struct ScanResult: Sendable, Equatable {
    /// Why it looks like a telemetry dongle.
    public enum Match: String, Sendable, Comparable {
        /// It advertises the Nordic UART Service.
        case nus = "NUS"
        /// Its manufacturer data carries Nordic's company identifier 0x0059.
        case nordic = "Nordic 0x0059"
        /// Its name starts with the configured `dongle.name_prefix`.
        case name

        public static func < (a: Match, b: Match) -> Bool { a.rawValue < b.rawValue }
    }

    public var address: String
    public var name: String?
    public var rssi: Int?
    public var matches: [Match]

    public init(address: String, name: String?, rssi: Int?, matches: [Match]) {
        self.address = address
        self.name = name
        self.rssi = rssi
        self.matches = matches
    }
}

/// What `tether scan` prints. A device's name and address come from the
/// air (a nearby advertiser chooses its name): both are printed through
/// `TerminalText.escaped`, so that no advertiser can write control
/// characters or escape sequences to the operator's terminal.
extension ScanResult {
    /// The progress line for a find, `elapsed` after the scan started.
    public func foundLine(after elapsed: String) -> String {
        "  +\(elapsed) found \(TerminalText.escaped(address)) \(name.map { TerminalText.escaped($0) } ?? "(no name)") \(rssi.map { "\($0) dBm" } ?? "")"
    }

    /// The table of finds, one per line under a header.
    public static func table(_ results: [ScanResult]) -> String {
        var lines = ["ADDRESS            RSSI  NAME                  MATCH"]
        for r in results {
            let rssi = r.rssi.map { String($0) } ?? "?"
            lines.append(
                TerminalText.escaped(r.address).padded(to: 19)
                    + rssi.padded(to: 6)
                    + (r.name.map { TerminalText.escaped($0) } ?? "-").padded(to: 22)
                    + r.matches.map(\.rawValue).joined(separator: ", ")
            )
        }
        return lines.joined(separator: "\n")
    }
}

/// Discovers nearby dongles through bluetoothd, as `tether scan` does.
///
/// Only devices heard advertising during this scan count (an RSSI update
/// or a new device object with an RSSI): bluetoothd also keeps devices it
/// saw long ago, which may be gone or asleep.
public struct DongleScanner: Sendable {
    public enum Failure: Error, Sendable, CustomStringConvertible {
        case noAdapter(String?)
        case adapterOff(String)
        /// Something owns org.bluez but did not answer within `waited`: a hung bluetoothd.
        case bluezNotAnswering(pid: UInt32?, waited: Duration)
        case bluez(BlueZError)

        public var description: String {
            switch self {
            case .noAdapter(let name?): "no Bluetooth adapter \(name)"
            case .noAdapter(nil): "no Bluetooth adapter (is bluetoothd running?)"
            case .adapterOff(let name): "the adapter \(name) is powered off (bluetoothctl power on)"
            case .bluezNotAnswering(let pid, let waited):
                "\(pid.map { "bluetoothd (pid \($0))" } ?? "bluetoothd") owns \(BlueZ.service) on the system bus but did not "
                    + "answer within \(DurationText.rounded(waited)): it is hung, and nothing can scan through it; "
                    + "systemctl restart bluetooth ends it"
            case .bluez(let error): "\(error)"
            }
        }
    }

    /// A call bluetoothd left unanswered is told as a hang, with the pid the
    /// bus gives for org.bluez (the bus answers when bluetoothd does not).
    private func explain(_ error: BlueZError) async -> Failure {
        guard error.name == DBusErrorName.noReply else { return .bluez(error) }
        do {
            // Nobody owns it now: bluetoothd left without answering.
            guard let pid = try await client.bus.processID(ofOwnerOf: BlueZ.service) else { return .bluez(error) }
            return .bluezNotAnswering(pid: pid, waited: client.callTimeout)
        } catch {
            return .bluezNotAnswering(pid: nil, waited: client.callTimeout)
        }
    }

    public let client: BlueZClient
    /// `hci0`, or nil for the first adapter.
    public var adapterName: String?
    public var namePrefix: String?

    public init(bus: Bus, adapterName: String? = nil, namePrefix: String? = nil) {
        client = BlueZClient(bus: bus)
        self.adapterName = adapterName
        self.namePrefix = namePrefix
    }

    /// Scans for `duration`; `found` gets each dongle when first heard.
    /// Stops discovery before returning the dongles, strongest signal first.
    public func scan(
        for duration: Duration, found: @escaping @Sendable (ScanResult) -> Void = { _ in }
    ) async throws(Failure) -> [ScanResult] {
        let events: BlueZEvents
        let tree: ObjectTree
        do {
            // Subscribe first: nothing said after the snapshot is missed.
            events = try await client.events()
            tree = try await client.managedObjects()
        } catch {
            throw await explain(error)
        }
        let adapters = tree.adapters.sorted { $0.path < $1.path }
        guard let adapter = adapterName.map({ name in adapters.first { $0.interfaceName == name } }) ?? adapters.first else {
            throw .noAdapter(adapterName)
        }
        guard adapter.powered else { throw .adapterOff(adapter.interfaceName) }
        do {
            // No UUID filter: a dongle may advertise only its manufacturer data.
            try await client.setDiscoveryFilter(adapter.path)
            try await client.startDiscovery(adapter.path)
        } catch {
            // InProgress on a fresh connection is a start the controller
            // failed; while the adapter discovers for someone else (the
            // daemon) we still hear what it hears (BlueZReplies.startDiscovery).
            if BlueZReplies.startDiscovery(.failure(error), adapterDiscovering: adapter.discovering) != nil {
                throw await explain(error)
            }
        }

        let collector = Task { () -> [ScanResult] in
            var tree = tree
            var heard = Set<ObjectPath>()
            var reported = Set<ObjectPath>()
            for await event in events {
                tree.apply(event)
                let path: ObjectPath? = switch event {
                case .interfacesAdded(let path, _): path
                case .propertiesChanged(let path, BlueZ.deviceInterface, let changed, _) where changed["RSSI"] != nil: path
                default: nil
                }
                guard let path, let device = tree.device(path), device.adapter == adapter.path, device.rssi != nil else {
                    continue
                }
                heard.insert(path)
                if !reported.contains(path), let match = result(device) {
                    reported.insert(path)
                    found(match)
                }
            }
            // The latest name and RSSI of each, as the tree has them now.
            return heard.compactMap { tree.device($0) }.compactMap(result).sorted { ($0.rssi ?? -999) > ($1.rssi ?? -999) }
        }
        try? await Task.sleep(for: duration)
        collector.cancel()
        let dongles = await collector.value
        do { try await client.stopDiscovery(adapter.path) } catch {}
        return dongles
    }

    private func result(_ device: Device) -> ScanResult? {
        var matches: [ScanResult.Match] = []
        if device.uuids.contains(ConfigUUID.nusService) { matches.append(.nus) }
        if device.manufacturerData[0x0059] != nil { matches.append(.nordic) }
        if let namePrefix, let name = device.name ?? device.alias, name.hasPrefix(namePrefix) { matches.append(.name) }
        guard !matches.isEmpty else { return nil }
        return ScanResult(address: device.address, name: device.name ?? device.alias, rssi: device.rssi, matches: matches)
    }
}
