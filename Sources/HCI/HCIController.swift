import CBluetooth
import DurationUnits
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

    /// What a controller said when asked for its version.
    public enum Answer: Sendable, Equatable {
        case answered
        /// No answer within the timeout: the controller is wedged.
        case silent
        /// It could not be asked (down, gone, no Bluetooth here): says why.
        case notAsked(String)
    }

    /// Asks the controller named like `hci0` for its version and waits up to
    /// `timeout` (blocks that long at most: call it off latency-sensitive paths).
    public static func askVersion(_ name: String, timeout: Duration) -> Answer {
        let id = name.withCString { tether_hci_devid($0) }
        if id < 0 { return .notAsked(failure(-id, name: name).description) }
        let milliseconds = Int32(clamping: timeout.wholeMilliseconds)
        let result = tether_hci_read_version(id, milliseconds)
        switch -result {
        case 0: return .answered
        case ETIMEDOUT: return .silent
        case ENETDOWN: return .notAsked("\(name) is down")
        default: return .notAsked(failure(-result, name: name).description)
        }
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
