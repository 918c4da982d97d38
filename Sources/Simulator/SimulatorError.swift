/// Why the simulator could not start.
public enum SimulatorError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidAddress(String)
    case invalidPath(String)
    case cannotOpenEventLog(String)

    public var description: String {
        switch self {
        case .invalidAddress(let address): "not a Bluetooth address: \(address)"
        case .invalidPath(let path): "not a D-Bus object path: \(path)"
        case .cannotOpenEventLog(let path): "cannot create the event log \(path)"
        }
    }
}
