import BlueZ
import BlueZLinkFailure
import Configuration
import LinkSupervisor
import Logging

/// Pairing's calls to bluetoothd, in the lane's order like every other.
extension ActionLane {
    /// Registers Tether's agent on this connection and asks to be the
    /// default (bluetoothd sends pairings the kernel starts there). Sent
    /// whenever bluetoothd appears: its agents die with it.
    func registerAgent(_ agent: PairingAgent) {
        send(.registerAgent(PairingAgent.path, capability: agent.capability)) { [self] result in
            if case .failure(let error) = result, error.name != BlueZ.ErrorName.alreadyExists {
                logger.error(
                    "cannot register Tether's pairing agent: \(error); pairing will fail",
                    metadata: ["event": "agent-registered", "error": "\(error)"])
                return
            }
            send(.requestDefaultAgent(PairingAgent.path)) { [logger] result in
                if case .failure(let error) = result {
                    logger.warning(
                        "Tether's pairing agent is not bluetoothd's default (\(error)): pairings Tether starts still use it, pairings the kernel starts do not",
                        metadata: ["event": "agent-registered"])
                } else {
                    logger.info("pairing agent registered (\(agent.capability)), the default agent", metadata: ["event": "agent-registered"])
                }
            }
        }
    }

    /// Device1.Pair, then Trusted = true. `AlreadyExists`: bonded already
    /// (the Paired change not seen yet), which is what was wanted.
    ///
    /// With a passkey configured, a pairing the agent gave no passkey to is
    /// not the dongle's proof: bluetoothd accepts Just Works for the caller
    /// of Pair without asking any agent, so a device (or an impostor at its
    /// address) with no keyboard nor display gets an unauthenticated bond.
    /// That is a failure the supervisor drops the link for and removes the
    /// bond (`LinkFailure.unauthenticatedBond`); it is never trusted.
    func pair(_ id: Int, timeout: Duration) {
        guard let device = resolution.device?.path else {
            return finish(.pairFinished(attempt: id, .failure(LinkFailure(.transient, "the dongle is not known"))))
        }
        agent?.pairingStarted(device)
        // A little longer than the supervisor's deadline, which cancels
        // the pairing properly (Disconnect) when it fires.
        send(.pair(device, timeout: timeout + .seconds(1))) { [self] result in
            switch result {
            case .failure(let error) where error.name != BlueZ.ErrorName.alreadyExists:
                finish(.pairFinished(attempt: id, .failure(Self.pairingFailure(error, config.dongle.pairing))))
            case .success, .failure:
                if case .passkey = config.dongle.pairing, agent?.passkeyGiven(device) != true {
                    let failure = LinkFailure(
                        .fatal,
                        "the dongle paired without asking for the passkey (Just Works: unauthenticated; dongle.pairing is \"passkey-file\"): a device without a passkey, or not the dongle, answered at \(config.dongle.address ?? "its address")",
                        unauthenticatedBond: true)
                    return finish(.pairFinished(attempt: id, .failure(failure)))
                }
                send(.setTrusted(device, true)) { [logger] result in
                    if case .failure(let error) = result { logger.warning("cannot mark the dongle trusted: \(error)") }
                }
                finish(.pairFinished(attempt: id, .success(())))
            }
        }
    }

    /// A refused pairing names what to check.
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
}
