extension Supervisor {
    /// What `tether status` and the control API show.
    public struct Status: Sendable, Equatable {
        public var state: SupervisorState = .waitingForBluez
        /// Attempts made in the current window (0 when there is none).
        public var windowAttempt = 0
        /// When the next attempt is due, on the supervisor's clock.
        public var nextAttemptAt: Duration?
        public var lastError: String?
        /// Times the link came back after being lost.
        public var reconnects = 0
        public var connectedSince: Duration?
        /// Times the silence limit passed while subscribed.
        public var silenceEvents = 0
        /// The dongle refuses its bond and Tether does not (or no longer)
        /// pair again: what an operator must do. Nil once online (the
        /// outage it belongs to is over).
        public var bondProblem: String?
        /// While away: since when (the supervisor's clock).
        public var awaySince: Duration?

        public init() {}
    }

    /// What `tether status` and the control API show, derived from the state.
    public var status: Status {
        var status = Status()
        status.state = current.name
        status.windowAttempt = current.window?.attempts ?? 0
        switch current {
        case .online(_, let since):
            status.connectedSince = since
        case .outage(let outage, let recovery):
            if case .reported(let problem) = outage.bondLoss { status.bondProblem = problem }
            switch recovery {
            case .backingOff(_, let at): status.nextAttemptAt = at
            case .coolingDown(let cooldown): status.nextAttemptAt = cooldown.blindAttemptAt
            case .away(let away): if away.confirmed { status.awaySince = away.since }
            case .waitingForBluez, .waitingForAdapter, .searching, .connecting, .resolving, .pairing, .subscribing,
                 .waitingForData, .awaitingDisconnect, .escalating:
                break
            }
        }
        status.lastError = history.lastError
        status.reconnects = history.reconnects
        status.silenceEvents = history.silenceEvents
        return status
    }
}
