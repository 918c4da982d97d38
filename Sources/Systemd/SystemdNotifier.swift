import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Tells the service manager about the daemon's state (sd_notify(3)):
/// started, still alive, shutting down, and a one-line status for
/// `systemctl status`. Built from the environment so that the same daemon
/// runs unchanged outside systemd, where every call is a no-op.
public struct SystemdNotifier: Sendable {
    /// NOTIFY_SOCKET as systemd gave it, or nil when not supervised.
    public let socketAddress: String?

    /// Reads NOTIFY_SOCKET from `environment`; absent or empty means not supervised.
    public init(environment: [String: String] = ProcessEnvironment.current()) {
        self.init(socketAddress: environment["NOTIFY_SOCKET"])
    }

    /// For a socket chosen by the caller (tests, or a wrapper that is not systemd).
    public init(socketAddress: String?) {
        if let socketAddress, !socketAddress.isEmpty {
            self.socketAddress = socketAddress
        } else {
            self.socketAddress = nil
        }
    }

    /// False when every notification will be `.notSupervised`.
    public var isSupervised: Bool { socketAddress != nil }

    /// Start-up is complete; with `Type=notify`, units ordered after this
    /// one start only now.
    @discardableResult
    public func ready() -> NotifyOutcome {
        send([("READY", "1")])
    }

    /// Free-form text shown by `systemctl status`; newlines become spaces.
    @discardableResult
    public func status(_ text: String) -> NotifyOutcome {
        send([("STATUS", text)])
    }

    /// Proves liveness; with `WatchdogSec=` set, missing these gets the
    /// daemon killed and restarted. See `watchdogInterval(environment:pid:)`.
    @discardableResult
    public func watchdog() -> NotifyOutcome {
        send([("WATCHDOG", "1")])
    }

    /// Shutdown has begun, so a slow exit is not mistaken for a hang.
    @discardableResult
    public func stopping() -> NotifyOutcome {
        send([("STOPPING", "1")])
    }

    /// Sends `assignments` in one datagram, so that e.g. READY and STATUS
    /// arrive together. Values have newlines replaced by spaces; a key that
    /// the protocol cannot carry sends nothing.
    @discardableResult
    public func send(_ assignments: [(String, String)]) -> NotifyOutcome {
        guard let socketAddress else { return .notSupervised }
        // systemd also hands out vsock: addresses (to VMs); this daemon only
        // runs on the host, so anything but a path or abstract name is an
        // error worth reporting rather than a relative path to guess at.
        guard socketAddress.hasPrefix("/") || socketAddress.hasPrefix("@") else {
            return .failed(UnixSocketError(code: EAFNOSUPPORT))
        }
        let bytes: [UInt8]
        switch NotifyMessage.encode(assignments) {
        case .success(let encoded): bytes = encoded
        case .failure(let invalid): return .invalidKey(invalid.key)
        }
        switch UnixDatagram.send(bytes, to: socketAddress) {
        case .success: return .sent
        case .failure(let error): return .failed(error)
        }
    }
}
