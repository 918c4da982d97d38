import BlueZ
import LinkSupervisor

extension LinkFailure {
    /// A BlueZ error as the supervisor sees it: its disposition becomes the
    /// failure's kind (`needsCancel` is what makes the supervisor send
    /// Device1.Disconnect before the next attempt), and whether it points at
    /// a stale device object, or at one bluetoothd no longer has, travels
    /// with it.
    ///
    /// Here (BlueZReplies) so that the daemon's adapter layer (`ActionLane`) and
    /// the deterministic simulation run the same mapping.
    public init(_ error: BlueZError) {
        let kind: LinkFailure.Kind = switch error.disposition {
        case .transient: .transient
        #if DST_BUG_INPROGRESS_NOT_CANCELLED
        // Planted bug (make dst-selftest): a stuck connect is never cancelled.
        case .needsCancel: .transient
        #else
        case .needsCancel: .needsCancel
        #endif
        case .fatal: .fatal
        }
        self.init(
            kind, error.description, staleDevice: error.pointsAtStaleDevice, deviceGone: error.isUnknownObject,
            noAnswer: error.peerDidNotAnswer)
    }
}
