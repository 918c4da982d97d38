/// What became of one notification. The daemon must keep running whatever
/// happens to its messages to the service manager, so nothing here is
/// thrown: the caller decides whether a failure is worth a log line.
public enum NotifyOutcome: Sendable, Hashable {
    /// The datagram was handed to the kernel.
    case sent
    /// There is no NOTIFY_SOCKET: not started by systemd (or not as
    /// `Type=notify`), so there is nobody to tell.
    case notSupervised
    /// An assignment's key cannot be expressed in the protocol; nothing was sent.
    case invalidKey(String)
    /// The socket refused the datagram, or NOTIFY_SOCKET names an address
    /// this implementation cannot reach.
    case failed(UnixSocketError)

    /// True when the service manager should have heard us but did not.
    public var isFailure: Bool {
        switch self {
        case .sent, .notSupervised: false
        case .invalidKey, .failed: true
        }
    }
}
