/// The supervisor's timers: a fire of one that is not armed is stale.
extension Supervisor {
    mutating func timerFired(_ timer: SupervisorTimer, _ actions: inout Actions) {
        guard armedTimers.remove(timer) != nil else { return }
        switch timer {
        case .retry: retryTimerFired(&actions)
        case .attemptDeadline: attemptDeadlinePassed(&actions)
        case .keepalive: keepAliveTimerFired(&actions)
        case .silence: silenceTimerFired(&actions)
        case .pollDeadline: pollDeadlinePassed(&actions)
        case .discoveryRetry: startDiscoveryIfStopped(&actions)
        case .searchCheck: searchCheckFired(&actions)
        case .scanWatch: scanWatchFired(&actions)
        case .adapterRecovery: adapterRecoveryTimerFired(&actions)
        case .powerOn: powerOnTimerFired(&actions)
        case .disconnectDeadline: disconnectDeadlinePassed(&actions)
        }
    }

    /// The backoff elapsed (the window's next attempt), or the cooldown (its
    /// blind attempt).
    mutating func retryTimerFired(_ actions: inout Actions) {
        guard case .outage(_, let recovery) = current else { return }
        switch recovery {
        case .backingOff(let window, _):
            attempt(window: window, cause: "backoff elapsed", &actions)
        case .coolingDown:
            stopDiscoveryIfRunning(&actions)
            attempt(window: Window(start: now, blind: true), cause: "cooldown elapsed; blind attempt", &actions)
        case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
             .waitingForData, .awaitingDisconnect, .escalating, .away:
            break
        }
    }
}
