import BlueZ
import Configuration

/// Follows the controller Tether uses through bluetoothd's object tree and
/// says, once each, what an operator must know when it changes identity: a
/// USB replug or reset gives a controller the lowest free index, so `hci0`
/// can come back as `hci1`, and `hci0` can later name another controller.
///
/// Loop-confined (the link service's loop), like the tree it reads.
struct AdapterWatch {
    enum Note: Equatable, CustomStringConvertible {
        /// The controller (found by its address) is back under another index.
        case moved(address: String, from: String, to: String)
        /// The configured index holds a controller with another address.
        case replaced(name: String, was: String, now: String)
        /// The configured index is gone; the same controller is elsewhere.
        case movedAwayFromConfiguredName(name: String, address: String, now: String)
        /// The configured index is gone.
        case gone(name: String, address: String)

        var description: String {
            switch self {
            case .moved(let address, let from, let to):
                "\(from) (\(address)) is now \(to)"
            case .replaced(let name, let was, let now):
                "\(name) now holds the controller \(now), not \(was) as before; using it as [bluez] adapter = \"\(name)\" says (name the controller by its address to follow it instead)"
            case .movedAwayFromConfiguredName(let name, let address, let now):
                "\(name) (\(address)) is gone and the same controller is now \(now), but [bluez] adapter names \(name): set adapter = \"\(address)\" to follow it"
            case .gone(let name, let address):
                "\(name) (\(address)) is gone from bluetoothd"
            }
        }

        var eventName: String {
            switch self {
            case .moved, .movedAwayFromConfiguredName: "adapter-moved"
            case .replaced: "adapter-replaced"
            case .gone: "adapter-gone"
            }
        }
    }

    let config: TetherConfig.BlueZSection
    /// The controller last used: its index name and address.
    private var last: (name: String, address: String)?
    /// What was told of the configured index's absence, so it is told once.
    private var told: Absence?
    private enum Absence { case gone, movedAway }

    init(config: TetherConfig.BlueZSection) {
        self.config = config
    }

    /// Called after each resolution while bluetoothd is on the bus (while it
    /// is away every adapter is, and nothing moved).
    mutating func update(resolved: Adapter?, adapters: [Adapter]) -> [Note] {
        var notes: [Note] = []
        if let resolved {
            let name = resolved.interfaceName
            let address = resolved.address.uppercased()
            if let last, !address.isEmpty {
                if last.address == address, last.name != name {
                    notes.append(.moved(address: address, from: last.name, to: name))
                } else if last.name == name, last.address != address, !last.address.isEmpty, config.adapter == name {
                    notes.append(.replaced(name: name, was: last.address, now: address))
                }
            }
            last = (name, address)
            told = nil
        } else if let last, config.adapter == last.name, !adapters.contains(where: { $0.interfaceName == last.name }) {
            if let elsewhere = adapters.first(where: { $0.address.uppercased() == last.address }) {
                if told != .movedAway {
                    told = .movedAway
                    notes.append(.movedAwayFromConfiguredName(name: last.name, address: last.address, now: elsewhere.interfaceName))
                }
            } else if told == nil {
                told = .gone
                notes.append(.gone(name: last.name, address: last.address))
            }
        }
        return notes
    }
}
