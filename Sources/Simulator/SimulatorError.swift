/// Why the simulator could not start.
public enum SimulatorError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidAddress(String)
    case invalidPath(String)
    case cannotOpenEventLog(String)
    /// The simulated rfkill socket could not be bound (path, errno).
    case cannotServeRfkill(String, Int32)
    /// `DonglePairing.passkey` beyond six digits (999999).
    case invalidPasskey(UInt32)

    public var description: String {
        switch self {
        case .invalidAddress(let address): "not a Bluetooth address: \(address)"
        case .invalidPath(let path): "not a D-Bus object path: \(path)"
        case .cannotOpenEventLog(let path): "cannot create the event log \(path)"
        case .cannotServeRfkill(let path, let code): "cannot serve the simulated rfkill at \(path): errno \(code)"
        case .invalidPasskey(let passkey): "not a six-digit passkey: \(passkey)"
        }
    }
}
