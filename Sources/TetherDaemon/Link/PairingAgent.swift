import BlueZ
import Configuration
import DBus
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
/// Threading: the bus runs the handlers (children of the daemon's
/// method-call task group); the dongle's object path is set from the link
/// service's loop, so it sits behind a Mutex.
final class PairingAgent: Sendable {
    static let path: ObjectPath = "/io/tether/Agent"

    private let pairing: TetherConfig.Pairing
    private let logger: Logger
    private let dongle = Mutex<ObjectPath?>(nil)

    init(pairing: TetherConfig.Pairing, logger: Logger) {
        self.pairing = pairing
        self.logger = logger
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

    /// The dongle's device object now (nil while it is unknown).
    func setDongle(_ path: ObjectPath?) {
        dongle.withLock { $0 = path }
    }

    var interface: ExportedInterface {
        ExportedInterface(
            name: BlueZ.agentInterface,
            methods: [
                "Release": .init { _ in [] },
                "Cancel": .init { [logger] _ in
                    logger.info("bluetoothd cancelled the pairing request it made to Tether's agent")
                    return []
                },
                "RequestPasskey": .init(in: "o", out: "u") { [self] call in
                    let device = try deviceArgument(call)
                    guard case .passkey(let passkey, _) = pairing else {
                        throw refusal(device, "a passkey, but dongle.pairing is \"\(pairing.name)\"")
                    }
                    try requireDongle(device, asking: "a passkey")
                    logger.info("giving bluetoothd the passkey from dongle.passkey_file for \(device.rawValue)")
                    return [.uint32(passkey)]
                },
                "RequestAuthorization": .init(in: "o") { [self] call in
                    // Just Works the kernel started (an encrypted
                    // characteristic): accepted for the dongle alone.
                    let device = try deviceArgument(call)
                    try requireDongle(device, asking: "to authorize a Just Works pairing")
                    return []
                },
                "RequestConfirmation": .init(in: "ou") { [self] call in
                    // Numeric comparison: Tether cannot see the dongle's
                    // number, so only where Just Works is what was configured.
                    let device = try deviceArgument(call)
                    guard case .justWorks = pairing else {
                        throw refusal(device, "to confirm a number, which Tether cannot compare (dongle.pairing is \"\(pairing.name)\")")
                    }
                    try requireDongle(device, asking: "to confirm a pairing")
                    return []
                },
                "AuthorizeService": .init(in: "os") { [self] call in
                    let device = try deviceArgument(call)
                    try requireDongle(device, asking: "to authorize a service")
                    return []
                },
                "RequestPinCode": .init(in: "o", out: "s") { [self] call in
                    throw refusal(try deviceArgument(call), "a PIN code (BR/EDR legacy pairing), which Tether never gives")
                },
                "DisplayPinCode": .init(in: "os") { _ in [] },
                "DisplayPasskey": .init(in: "ouq") { _ in [] },
            ]
        )
    }

    private func deviceArgument(_ call: MethodCall) throws(DBusError) -> ObjectPath {
        guard let device = try call.argument(0).objectPath else {
            throw .remote(name: BlueZ.ErrorName.rejected, message: "expected a device object path")
        }
        return device
    }

    private func requireDongle(_ device: ObjectPath, asking what: String) throws(DBusError) {
        guard dongle.withLock({ $0 }) == device else {
            throw refusal(device, "\(what) for a device that is not Tether's dongle")
        }
    }

    private func refusal(_ device: ObjectPath, _ what: String) -> DBusError {
        logger.notice("refused bluetoothd's request for \(what) (\(device.rawValue))", metadata: ["event": "agent-refused"])
        return .remote(name: BlueZ.ErrorName.rejected, message: "Tether's agent answers only for its dongle")
    }
}
