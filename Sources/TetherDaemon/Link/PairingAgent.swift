import BlueZ
import Configuration
import DBus
import EventLoop
import Logging
import Synchronization

/// Tether's own `org.bluez.Agent1`: answers bluetoothd's pairing questions
/// for the dongle, and refuses them for every other device.
///
/// bluetoothd asks the agent of the connection that called `Device1.Pair`,
/// or the default agent for a pairing the kernel starts itself (a
/// characteristic that needs encryption). Tether registers this one on its
/// own bus connection and asks to be the default, so both reach it (see
/// docs/pairing-research.md). Being the default makes it answer for any
/// device on the adapter, hence the check against the dongle's object.
///
/// The system bus is shared with every local user, and anyone may call an
/// object Tether exports: only a call whose sender (stamped by dbus-daemon)
/// is org.bluez's current unique owner is bluetoothd's. Any other caller is
/// refused (NotAuthorized) before its arguments are looked at, so the
/// passkey never reaches it; such calls are logged at warning level, at most
/// once a minute (`ForeignCalls`).
///
/// With a passkey (`pairing = "passkey-file"`) the agent never accepts a
/// Just Works prompt (RequestAuthorization, RequestConfirmation): a pairing
/// that took no passkey is not authenticated, and the dongle's could be
/// anyone's. It also notes when it hands the passkey out, so that a
/// `Device1.Pair` that succeeded without asking for it (bluetoothd accepts
/// Just Works for the caller of Pair without asking any agent) is caught
/// (`passkeyGiven`, checked by `ActionLane.pair`).
///
/// Threading: the bus runs the handlers (children of the daemon's
/// method-call task group); the dongle's object path and bluetoothd's name
/// are set from the link service's loop, so the state sits behind a Mutex.
final class PairingAgent: Sendable {
    static let path: ObjectPath = "/io/tether/Agent"

    private let pairing: TetherConfig.Pairing
    private let passkey: Passkey?
    /// `dongle.address` as BlueZ spells it in a device path
    /// (`dev_AA_BB_CC_DD_EE_FF`), when configured.
    private let addressElement: String?
    private let logger: Logger
    /// The monotonic clock the refusals are paced by: the service's loop's.
    private let now: @Sendable () -> MonotonicInstant
    private let state = Mutex(State())

    private struct State {
        var dongle: ObjectPath?
        var bluezOwner: String?
        /// Devices the passkey went to since their pairing began.
        var passkeyGiven: Set<ObjectPath> = []
        var foreign = ForeignCalls()
    }

    /// - Parameter passkey: what `tether run` read (`loadPasskey`); nil
    ///   refuses every passkey request.
    init(
        pairing: TetherConfig.Pairing, passkey: Passkey? = nil, address: String? = nil, logger: Logger,
        now: @escaping @Sendable () -> MonotonicInstant = { MonotonicInstant.now }
    ) {
        self.now = now
        self.pairing = pairing
        self.passkey = passkey
        self.logger = logger
        addressElement = address.map { "dev_" + String($0.uppercased().map { $0 == ":" ? "_" : $0 }) }
    }

    /// The agent's IO capability, as bluetoothd spells it: what decides the
    /// pairing method with the dongle's own. A passkey is typed (the dongle
    /// displays it, or has it printed), so KeyboardOnly; Just Works needs
    /// no input nor output.
    var capability: String {
        switch pairing {
        case .passkey: "KeyboardOnly"
        case .never, .justWorks: "NoInputNoOutput"
        }
    }

    private var usesPasskey: Bool {
        if case .passkey = pairing { true } else { false }
    }

    /// The dongle's device object now (nil while it is unknown).
    func setDongle(_ path: ObjectPath?) {
        state.withLock { $0.dongle = path }
    }

    /// org.bluez's unique owner now (nil while bluetoothd is away): the only
    /// caller answered.
    func setBluezOwner(_ owner: String?) {
        state.withLock { $0.bluezOwner = owner }
    }

    /// Tether is about to call Device1.Pair on `device`: a passkey given
    /// before belongs to another pairing.
    func pairingStarted(_ device: ObjectPath) {
        _ = state.withLock { $0.passkeyGiven.remove(device) }
    }

    /// Whether the passkey went to `device` since `pairingStarted`.
    func passkeyGiven(_ device: ObjectPath) -> Bool {
        state.withLock { $0.passkeyGiven.contains(device) }
    }

    var interface: ExportedInterface {
        ExportedInterface(
            name: BlueZ.agentInterface,
            methods: [
                "Release": .init { [self] call in
                    try requireBluez(call, "Release")
                    return []
                },
                "Cancel": .init { [self] call in
                    try requireBluez(call, "Cancel")
                    logger.info("bluetoothd cancelled the pairing request it made to Tether's agent")
                    return []
                },
                "RequestPasskey": .init(in: "o", out: "u") { [self] call in
                    try requireBluez(call, "RequestPasskey")
                    let device = try deviceArgument(call)
                    guard usesPasskey else {
                        throw refusal(device, "a passkey, but dongle.pairing is \"\(pairing.name)\"")
                    }
                    try requireDongle(device, asking: "a passkey")
                    guard let passkey else {
                        throw refusal(device, "a passkey, but tether run read none")
                    }
                    state.withLock { _ = $0.passkeyGiven.insert(device) }
                    logger.info("giving bluetoothd the passkey from \(pairing.passkeySourceText) for \(device.rawValue)")
                    return [.uint32(passkey.value)]
                },
                "RequestAuthorization": .init(in: "o") { [self] call in
                    // Just Works the kernel started (an encrypted
                    // characteristic): accepted for the dongle alone, and
                    // never where a passkey is configured.
                    try requireBluez(call, "RequestAuthorization")
                    let device = try deviceArgument(call)
                    guard !usesPasskey else {
                        throw refusal(device, "to authorize a Just Works pairing, which takes no passkey (dongle.pairing is \"passkey-file\")")
                    }
                    try requireDongle(device, asking: "to authorize a Just Works pairing")
                    return []
                },
                "RequestConfirmation": .init(in: "ou") { [self] call in
                    // Numeric comparison: Tether cannot see the dongle's
                    // number, so only where Just Works is what was configured.
                    try requireBluez(call, "RequestConfirmation")
                    let device = try deviceArgument(call)
                    guard case .justWorks = pairing else {
                        throw refusal(device, "to confirm a number, which Tether cannot compare (dongle.pairing is \"\(pairing.name)\")")
                    }
                    try requireDongle(device, asking: "to confirm a pairing")
                    return []
                },
                "AuthorizeService": .init(in: "os") { [self] call in
                    try requireBluez(call, "AuthorizeService")
                    let device = try deviceArgument(call)
                    try requireDongle(device, asking: "to authorize a service")
                    return []
                },
                "RequestPinCode": .init(in: "o", out: "s") { [self] call in
                    try requireBluez(call, "RequestPinCode")
                    throw refusal(try deviceArgument(call), "a PIN code (BR/EDR legacy pairing), which Tether never gives")
                },
                "DisplayPinCode": .init(in: "os") { [self] call in
                    try requireBluez(call, "DisplayPinCode")
                    try requireDongle(try deviceArgument(call), asking: "to display a PIN code")
                    return []
                },
                "DisplayPasskey": .init(in: "ouq") { [self] call in
                    try requireBluez(call, "DisplayPasskey")
                    try requireDongle(try deviceArgument(call), asking: "to display a passkey")
                    return []
                },
            ]
        )
    }

    /// Refuses a caller that is not bluetoothd (org.bluez's current owner).
    private func requireBluez(_ call: MethodCall, _ method: String) throws(DBusError) {
        let sender = call.sender
        let at = now()
        let report: Int? = state.withLock { state in
            if let owner = state.bluezOwner, !sender.isEmpty, sender == owner { return nil }
            return state.foreign.record(at: at)
        }
        guard let report else { return }
        if report >= 0 {
            let more = report > 0 ? " (\(report) more such calls refused since the last line)" : ""
            logger.warning(
                "refused a call to Tether's pairing agent (\(method)) from \(sender.isEmpty ? "an unnamed sender" : sender), which is not bluetoothd (org.bluez's owner)\(more); a local process is probing the agent",
                metadata: ["event": "agent-refused", "sender": "\(sender)"])
        }
        throw .remote(name: BlueZ.ErrorName.notAuthorized, message: "Tether's agent answers only bluetoothd")
    }

    private func deviceArgument(_ call: MethodCall) throws(DBusError) -> ObjectPath {
        guard let device = try call.argument(0).objectPath else {
            throw .remote(name: BlueZ.ErrorName.rejected, message: "expected a device object path")
        }
        return device
    }

    /// The device must be the dongle's object, and with `dongle.address`
    /// the object of that address.
    private func requireDongle(_ device: ObjectPath, asking what: String) throws(DBusError) {
        guard state.withLock({ $0.dongle }) == device else {
            throw refusal(device, "\(what) for a device that is not Tether's dongle")
        }
        if let addressElement, !device.rawValue.hasSuffix("/" + addressElement) {
            throw refusal(device, "\(what) for a device whose address is not dongle.address")
        }
    }

    private func refusal(_ device: ObjectPath, _ what: String) -> DBusError {
        logger.notice("refused bluetoothd's request for \(what) (\(device.rawValue))", metadata: ["event": "agent-refused"])
        return .remote(name: BlueZ.ErrorName.rejected, message: "Tether's agent answers only for its dongle")
    }
}

/// Calls to the agent from senders other than bluetoothd, told at most once
/// per `interval`: a local process calling in a loop must not fill the
/// journal (unique names are cheap, so the limit is on lines, not senders).
struct ForeignCalls {
    static let interval: Duration = .seconds(60)
    private var lastLine: MonotonicInstant?
    private var suppressed = 0

    /// A refused call at `now`: the number of calls left untold since the
    /// last line when this one is to be told, -1 when it is not.
    mutating func record(at now: MonotonicInstant) -> Int {
        if let lastLine, lastLine.duration(to: now) < Self.interval {
            suppressed += 1
            return -1
        }
        lastLine = now
        defer { suppressed = 0 }
        return suppressed
    }
}

extension TetherConfig.Pairing {
    /// Where the passkey comes from, for messages.
    var passkeySourceText: String {
        if case .passkey(let source) = self { "\(source)" } else { "nowhere" }
    }
}
