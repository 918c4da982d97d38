import BlueZ
import Configuration

/// Keeps a gateway with its own dongle when the config finds it by name or
/// service (`DongleBinding`), and says what else matched, each thing once.
///
/// Owned by `LinkService` and used on its loop only. Pure apart from the
/// binding file: it returns the lines to log, the caller logs them.
///
/// Invariants: with `dongle.address` in the config there is never a
/// binding (the config is the binding); a binding is taken only on a link
/// that came online; each other matching device is told at most once per
/// binding, and the choice among several before the first link once per
/// set of candidates.
struct DongleBindingWatch {
    let path: String
    /// How the config finds the dongle (`name_prefix "Tether"`); nil when it
    /// names its address, and nothing is bound.
    let matchedBy: String?
    private(set) var binding: DongleBinding?
    private var toldOthers: Set<String> = []
    private var toldChoice: [String] = []

    /// Nothing bound until `load()` reads the file.
    init(config: TetherConfig, matchedBy: String) {
        path = DongleBinding.path(inReadingsDirectory: config.readings.directory)
        self.matchedBy = config.dongle.address == nil ? matchedBy : nil
    }

    /// Reads the file (once, at start): the line to log, if any. A file
    /// that cannot be read is an error line, and Tether binds anew on the
    /// next link.
    mutating func load() -> (notice: String?, error: String?) {
        guard let matchedBy else { return (nil, nil) }
        do throws(DongleBinding.Failure) {
            binding = try DongleBinding.load(from: path)
        } catch {
            return (nil, error.description)
        }
        guard let binding else { return (nil, nil) }
        return ("bound to the dongle \(binding.address) (stored in \(path); the config matches by \(matchedBy)): no other device is connected to; `tether rebind` forgets it", nil)
    }

    var bound: String? { binding?.address }

    /// What to say of the devices that match the config now, `chosen` the
    /// one the resolver took.
    mutating func matched(_ devices: [Device], chosen: String?) -> [String] {
        guard let matchedBy else { return [] }
        func describe(_ device: Device) -> String {
            device.address.uppercased() + (device.rssi.map { " (\($0) dBm)" } ?? "")
        }
        if let bound {
            var lines: [String] = []
            for device in devices where device.address.uppercased() != bound && !toldOthers.contains(device.address.uppercased()) {
                toldOthers.insert(device.address.uppercased())
                lines.append("\(describe(device)) also matches \(matchedBy); not connecting to it: this gateway is bound to \(bound) (`tether rebind` to change)")
            }
            return lines
        }
        guard devices.count > 1 else { return [] }
        let candidates = devices.map { $0.address.uppercased() }.sorted()
        guard candidates != toldChoice else { return [] }
        toldChoice = candidates
        let list = devices.sorted { ($0.rssi ?? Int.min) > ($1.rssi ?? Int.min) }.map(describe).joined(separator: ", ")
        return ["\(devices.count) devices match \(matchedBy): \(list); trying \(chosen ?? "none") (connected, else the strongest signal); the first to come online becomes this gateway's dongle"]
    }

    /// The link came online with `address`: bound now if nothing was.
    mutating func online(with address: String) -> (notice: String?, error: String?) {
        guard let matchedBy, binding == nil, let new = DongleBinding(address: address) else { return (nil, nil) }
        binding = new
        toldOthers = []
        do throws(DongleBinding.Failure) {
            try new.store(to: path)
        } catch {
            return (nil, "\(error); bound to \(new.address) until Tether stops")
        }
        return ("bound to the dongle \(new.address) (matched by \(matchedBy)); from now on Tether connects to no other device, however strong (`tether rebind` forgets it; stored in \(path))", nil)
    }

    /// The bound dongle now shows `address` (its identity address, learnt
    /// in pairing: `DongleIdentity`): the binding moves to it. The error to
    /// log if it cannot be stored (it holds in memory all the same).
    mutating func follow(to address: String) -> String? {
        guard matchedBy != nil, binding != nil, let new = DongleBinding(address: address) else { return nil }
        binding = new
        do throws(DongleBinding.Failure) {
            try new.store(to: path)
        } catch {
            return "\(error); bound to \(new.address) until Tether stops"
        }
        return nil
    }

    /// Forgets the binding: the address it was, or nil when there was none.
    mutating func forget() throws(DongleBinding.Failure) -> String? {
        let was = binding?.address
        try DongleBinding.remove(at: path)
        binding = nil
        toldOthers = []
        toldChoice = []
        return was
    }
}
