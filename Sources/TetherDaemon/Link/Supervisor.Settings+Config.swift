import Configuration
import LinkSupervisor

extension Supervisor.Settings {
    /// The supervisor's settings from a config's `[keepalive]` and `[reconnect]`
    /// (in the daemon: the supervisor knows nothing of the config file, and the config nothing of the supervisor).
    public init(config: TetherConfig) {
        self.init(
            policy: config.reconnect.policy, keepaliveEnabled: config.keepalive.enabled,
            keepaliveInterval: config.keepalive.interval, keepaliveTimeout: config.keepalive.timeout,
            escalation: config.reconnect.escalate
        )
        keepaliveConfirmEvery = config.keepalive.confirmsEveryPoll ? nil : config.keepalive.confirmEvery
        silenceLimit = config.silenceLimit
        staleDeviceRemoval = config.reconnect.removeStaleDevice
        scanStallAfter = config.reconnect.scanStallAfter
        pairs = config.dongle.pairing.pairs
    }
}
