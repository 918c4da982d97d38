import CBluetooth
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Raw control of a local Bluetooth controller through libbluetooth.
///
/// This is the last escalation step when bluetoothd's own API no longer
/// helps: it takes the controller down and up, which resets it. It needs
/// CAP_NET_ADMIN and a kernel with AF_BLUETOOTH.
public enum HCIController {
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// This kernel has no Bluetooth (or it is not allowed here).
        case unavailable(String)
        /// No such controller.
        case noDevice(String)
        case failed(String)

        public var description: String {
            switch self {
            case .unavailable(let why): "HCI reset unavailable: \(why)"
            case .noDevice(let name): "no Bluetooth controller \(name)"
            case .failed(let why): "HCI reset failed: \(why)"
            }
        }
    }

    /// Resets the controller named like `hci0`. Blocks for as long as the
    /// kernel takes (well under a second); call it off latency-sensitive paths.
    public static func reset(_ name: String) -> Result<Void, Failure> {
        let id = name.withCString { tether_hci_devid($0) }
        if id < 0 { return .failure(failure(-id, name: name)) }
        let result = tether_hci_reset(id)
        if result < 0 { return .failure(failure(-result, name: name)) }
        return .success(())
    }

    private static func failure(_ code: Int32, name: String) -> Failure {
        let text = String(cString: strerror(code))
        switch code {
        case EAFNOSUPPORT, EPROTONOSUPPORT: return .unavailable("this kernel has no Bluetooth (\(text))")
        case EPERM, EACCES: return .unavailable("not permitted (\(text)); it needs CAP_NET_ADMIN")
        case ENODEV: return .noDevice(name)
        default: return .failed(text)
        }
    }
}
