import BlueZ
import Configuration
import LinkCore
import LinkSupervisor
import Logging

/// Pairing's calls to bluetoothd, in the lane's order like every other.
extension ActionLane {
    /// Registers Tether's agent on this connection and asks to be the
    /// default (bluetoothd sends pairings the kernel starts there). Sent
    /// whenever bluetoothd appears: its agents die with it.
    func registerAgent(_ agent: PairingAgent) {
        send(.registerAgent(PairingAgent.path, capability: agent.capability)) { [self] result in
            if let error = BlueZReplies.registerAgent(result.map { _ in () }) {
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

    /// Device1.Pair, then Trusted = true once its answer (by
    /// `BlueZReplies.pair`'s rules, which refuse a bond the passkey did not
    /// make) says the dongle is bonded; an unauthenticated bond is never
    /// trusted.
    func pair(_ id: Int, timeout: Duration) {
        guard let device = resolution.device?.path else {
            return finish(.pairFinished(attempt: id, .failure(LinkFailure(.transient, "the dongle is not known"))))
        }
        agent?.pairingStarted(device)
        // A little longer than the supervisor's deadline, which cancels
        // the pairing properly (Disconnect) when it fires.
        send(.pair(device, timeout: timeout + .seconds(1))) { [self] result in
            let answer = BlueZReplies.pair(
                result.map { _ in () }, pairing: config.dongle.pairing, passkeyGiven: agent?.passkeyGiven(device) == true,
                address: config.dongle.address)
            switch answer {
            case .failure(let failure):
                finish(.pairFinished(attempt: id, .failure(failure)))
            case .success:
                send(.setTrusted(device, true)) { [logger] result in
                    if case .failure(let error) = result { logger.warning("cannot mark the dongle trusted: \(error)") }
                }
                finish(.pairFinished(attempt: id, .success(())))
            }
        }
    }
}
