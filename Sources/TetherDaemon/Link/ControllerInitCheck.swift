import HCI
import Pacing

/// Tells "no adapter" apart from a controller that failed its initialisation.
///
/// The kernel lists such a controller (`/sys/class/bluetooth/hciN`) but never
/// announced it to the management interface, so bluetoothd has no adapter
/// for it: the HCI Reset of its set-up timed out (`hci0: Opcode 0x0c03
/// failed: -110`), and only a re-probe (USB reset, replug) brings it back.
/// A controller still being set up, one held through an HCI user channel
/// (up), and one bluetoothd lists are not suspects; a suspect must stay one
/// for `confirmAfter` (bluetoothd may be reading a controller just set up).
///
/// Pure: the link service feeds it the kernel's list and bluetoothd's on
/// its loop, and re-checks with `delay(afterCheck:)` while no adapter is
/// found: no timer runs once one is.
struct ControllerInitCheck {
    static let confirmAfter: Duration = .seconds(3)
    /// The re-checks' pace: 1 s doubling to a minute while no adapter is found.
    static let recheck = Backoff(first: .seconds(1), cap: .seconds(60))

    /// The configured controller: by index name, by address, or any.
    let name: String?
    let address: String?

    /// Suspects by name, with when each was first seen.
    private var suspects: [String: Duration] = [:]
    /// The controller reported as failed, if any.
    private(set) var failed: KernelController?
    /// A controller the kernel holds on a placeholder address
    /// (`PlaceholderAddress`, not all zeros) and bluetoothd does not list:
    /// unconfigured until its address is set, which is no failure.
    private(set) var awaitingAddress: KernelController?
    private var checks = 0

    init(name: String?, address: String?) {
        self.name = name
        self.address = address?.uppercased()
    }

    static func problem(_ controller: KernelController) -> String {
        "\(controller.name) is present in the kernel but failed its initialisation; bluetoothd cannot use it until it is reset or replugged"
    }

    enum Change: Equatable {
        case failed(KernelController)
        case cleared(KernelController)
    }

    /// One look at the kernel's controllers and the adapter names bluetoothd
    /// lists, at `now`. Returns what changed since the last look.
    mutating func check(kernel: [KernelController], listed: Set<String>, at now: Duration) -> Change? {
        checks += 1
        let unlisted = kernel.filter { !listed.contains($0.name) && (name == nil || $0.name == name) }
        awaitingAddress = unlisted.first { Self.awaitsAddress($0) }
        let candidates = kernel.filter { controller in
            guard controller.down, !listed.contains(controller.name), !Self.awaitsAddress(controller) else { return false }
            if let name { return controller.name == name }
            if let address {
                // A controller that failed before reading its address shows 00:00:…
                return controller.address == address || controller.address == "00:00:00:00:00:00"
            }
            return true
        }
        suspects = suspects.filter { entry in candidates.contains { $0.name == entry.key } }
        for candidate in candidates where suspects[candidate.name] == nil { suspects[candidate.name] = now }
        let confirmed = candidates.first { now - (suspects[$0.name] ?? now) >= Self.confirmAfter }
        switch (failed, confirmed) {
        case (nil, let found?):
            failed = found
            return .failed(found)
        case (let was?, nil) where !candidates.contains(where: { $0.name == was.name }):
            failed = nil
            return .cleared(was)
        default:
            return nil
        }
    }

    /// On a placeholder address other than all zeros (which a controller
    /// shows when its initialisation failed before reading one).
    static func awaitsAddress(_ controller: KernelController) -> Bool {
        controller.address != "00:00:00:00:00:00" && PlaceholderAddress.kind(of: controller.address) != nil
    }

    /// An adapter was found, or bluetoothd went away: nothing to check.
    mutating func reset() -> Change? {
        suspects = [:]
        awaitingAddress = nil
        checks = 0
        guard let was = failed else { return nil }
        failed = nil
        return .cleared(was)
    }

    /// How long to wait before the next look.
    var nextDelay: Duration {
        Self.recheck.delay(afterFailures: checks - 1)
    }
}
