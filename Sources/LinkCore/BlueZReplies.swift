import BlueZ
import Configuration
import LinkSupervisor

/// What bluetoothd's answer to each call means to the supervisor: which
/// errors are success for Tether, which name who can fix them, and which
/// turn one way of subscribing into another. One function per call; no
/// bus, no loop, no clock.
///
/// The daemon's `ActionLane` and the deterministic simulation (`make dst`)
/// both run these, so a rule changed here is a rule the simulated year
/// checks; nothing in `Sources/TetherDaemon/Link` compares a BlueZ error
/// name.
public enum BlueZReplies {
    /// Device1.Connect.
    public static func connect(_ result: Result<Void, BlueZError>) -> Result<Void, LinkFailure> {
        result.mapError(LinkFailure.init)
    }

    /// Adapter1.StartDiscovery; `adapterDiscovering`: the adapter's
    /// `Discovering` when the answer came. bluetoothd answers `InProgress`
    /// for two things: our own session already running (what was asked),
    /// and a first start the controller failed (adapter.c's
    /// `discovery_complete` replies `btd_error_busy` and drops the
    /// session: a locked-up controller's command timed out). Only
    /// `Discovering` tells them apart: taken as running while it says
    /// false, the dongle would go unheard until discovery is next renewed
    /// (10 minutes), long after the controller answers again. Nil:
    /// discovering.
    public static func startDiscovery(_ result: Result<Void, BlueZError>, adapterDiscovering: Bool) -> LinkFailure? {
        switch result {
        case .success: nil
        case .failure(let error) where error.name == BlueZ.ErrorName.inProgress:
            adapterDiscovering ? nil : LinkFailure(
                .transient,
                "StartDiscovery answered \(error.name) (\(error.message)) while the adapter is not discovering: the controller did not start the scan")
        case .failure(let error): LinkFailure(error)
        }
    }

    /// GattCharacteristic1.StartNotify on `characteristic` (its UUID, for
    /// the message). `InProgress` is our own earlier StartNotify still being
    /// served, or the session bluetoothd re-arms on a reconnect: success for
    /// us. Nil: subscribed.
    public static func startNotify(_ result: Result<Void, BlueZError>, characteristic: String) -> LinkFailure? {
        switch result {
        case .success:
            return nil
        case .failure(let error):
            #if DST_BUG_STARTNOTIFY_INPROGRESS_FAILS  // planted bug (make dst-selftest)
            return notifyFailure(error, characteristic: characteristic)
            #else
            return error.name == BlueZ.ErrorName.inProgress ? nil : notifyFailure(error, characteristic: characteristic)
            #endif
        }
    }

    /// What to do after GattCharacteristic1.AcquireNotify was refused.
    public enum AcquireNotifyRefusal: Sendable, Equatable {
        /// Another D-Bus client holds a notify session on it (`InProgress`),
        /// and the config allows StartNotify: receive through that instead.
        case useStartNotify
        case failed(LinkFailure)
    }

    /// AcquireNotify refused with `error`; `mayUseStartNotify` when
    /// `dongle.notify_path` is "auto".
    public static func acquireNotifyRefused(
        _ error: BlueZError, characteristic: String, mayUseStartNotify: Bool
    ) -> AcquireNotifyRefusal {
        guard error.name == BlueZ.ErrorName.inProgress else {
            return .failed(notifyFailure(error, characteristic: characteristic))
        }
        guard mayUseStartNotify else {
            return .failed(LinkFailure(.fatal, "another D-Bus client holds a notify session on \(characteristic), so AcquireNotify is refused (InProgress); set dongle.notify_path to \"auto\" or \"start-notify\""))
        }
        return .useStartNotify
    }

    /// A refused StartNotify or AcquireNotify. `NotPermitted "Not paired"`
    /// wants a bond. `NotPermitted "Notify acquired"` names who can fix it:
    /// another client holds the socket, or bluetoothd before 5.84 kept a
    /// stale acquisition after a link loss during an AcquireNotify (its
    /// commit 476ae809a), which only a bluetoothd restart clears. Transient:
    /// an attempt that raced the release of our own earlier socket succeeds
    /// next time.
    public static func notifyFailure(_ error: BlueZError, characteristic: String) -> LinkFailure {
        if error.name == BlueZ.ErrorName.notPermitted, error.message == "Not paired" {
            return LinkFailure(.fatal, "the notifications of \(characteristic) need an encrypted link and bluetoothd could not pair (NotPermitted \"Not paired\"): set dongle.pairing, or pair the dongle by hand (bluetoothctl pair)")
        }
        guard error.name == BlueZ.ErrorName.notPermitted, error.description.contains("Notify acquired") else {
            return LinkFailure(error)
        }
        return LinkFailure(.transient, "bluetoothd says the notifications of \(characteristic) are acquired (NotPermitted \"Notify acquired\") and Tether does not hold them: another D-Bus client does, or bluetoothd (before BlueZ 5.84) kept a stale AcquireNotify after a link dropped during one, which neither AcquireNotify nor StartNotify can get past until bluetoothd restarts (systemctl restart bluetooth)")
    }

    /// Device1.Pair. `AlreadyExists`: bonded already (the Paired change not
    /// seen yet), which is what was wanted. A refusal names what to check
    /// for the way the config pairs.
    ///
    /// With a passkey configured, a pairing the agent gave no passkey to
    /// (`passkeyGiven` false) is not the dongle's proof: bluetoothd accepts
    /// Just Works for the caller of Pair without asking any agent, so a
    /// device (or an impostor at its address) with no keyboard nor display
    /// gets an unauthenticated bond. That is a failure the supervisor drops
    /// the link for and removes the bond (`LinkFailure.unauthenticatedBond`).
    public static func pair(
        _ result: Result<Void, BlueZError>, pairing: TetherConfig.Pairing, passkeyGiven: Bool, address: String?
    ) -> Result<Void, LinkFailure> {
        if case .failure(let error) = result, error.name != BlueZ.ErrorName.alreadyExists {
            return .failure(pairingFailure(error, pairing))
        }
        if case .passkey = pairing, !passkeyGiven {
            return .failure(LinkFailure(
                .fatal,
                "the dongle paired without asking for the passkey (Just Works: unauthenticated; dongle.pairing is \"passkey-file\"): a device without a passkey, or not the dongle, answered at \(address ?? "its address")",
                unauthenticatedBond: true))
        }
        return .success(())
    }

    static func pairingFailure(_ error: BlueZError, _ pairing: TetherConfig.Pairing) -> LinkFailure {
        let failure = LinkFailure(error)
        guard error.name == BlueZ.ErrorName.authenticationFailed || error.name == BlueZ.ErrorName.authenticationRejected else {
            return failure
        }
        let hint = switch pairing {
        case .passkey(let source): "is the passkey in \(source) the dongle's?"
        case .justWorks: "the dongle may want a passkey (dongle.pairing = \"passkey-file\")"
        case .never: "dongle.pairing is \"never\""
        }
        return LinkFailure(failure.kind, "\(failure.description) (\(hint))", staleDevice: failure.staleDevice)
    }

    /// AgentManager1.RegisterAgent: `AlreadyExists` is our agent, registered
    /// on this connection before. Nil: registered.
    public static func registerAgent(_ result: Result<Void, BlueZError>) -> BlueZError? {
        switch result {
        case .success: nil
        case .failure(let error) where error.name == BlueZ.ErrorName.alreadyExists: nil
        case .failure(let error): error
        }
    }

    /// Adapter1.RemoveDevice.
    public static func removeDevice(_ result: Result<Void, BlueZError>) -> Result<Void, LinkFailure> {
        result.mapError(LinkFailure.init)
    }

    /// Adapter1.Powered set (an escalation's power cycle).
    public static func setPowered(_ result: Result<Void, BlueZError>) -> Result<Void, LinkFailure> {
        result.mapError(LinkFailure.init)
    }

    /// A keep-alive's WriteValue or ReadValue (its answer, not its bytes).
    public static func poll(_ result: Result<Void, BlueZError>) -> Result<Void, LinkFailure> {
        result.mapError(LinkFailure.init)
    }
}
