extension Supervisor {
    /// What is true of one outage: from the link's loss (or Tether's start)
    /// to the next time it is online, whatever the recovery's steps. Only
    /// `State.outage` carries it, so going online drops it: the next outage
    /// starts from nothing, and an answer to a call of this one (a
    /// RemoveDevice, a controller check) that comes later finds no id to
    /// match and changes nothing.
    struct Outage: Sendable {
        /// The device object was removed as stale in this outage: the next
        /// exhausted window escalates instead (one removal per outage).
        var removedStaleDevice = false
        /// bluetoothd has removed the dongle's object (it answered Tether's
        /// RemoveDevice, or a call on the object with `UnknownObject`) and
        /// the observation still shows it: its `InterfacesRemoved` comes after
        /// that reply. The dongle counts as unknown (searching, no connect on
        /// the gone object, which would only fail and cool down) until an
        /// observation without the object, an advertisement on it (it is
        /// back), or the next search check.
        var deviceObjectGone = false
        /// The retry window whose attempt found the dongle's object gone
        /// (`UnknownObject`): it goes on, with its backoff and its bounds,
        /// once the object is back, so that an object which keeps answering
        /// so while bluetoothd still shows it (and it advertises) costs one
        /// bounded window, not a fresh window at every advertisement (`make
        /// dst` found ten connects a second).
        var windowOfGoneObject: Window?
        /// What became of a bond the dongle refused in this outage: the bond
        /// is renewed (removed, paired again) once per outage, so a dongle
        /// that refuses every bond costs one removal and one pairing, not a
        /// loop of them.
        var bondLoss: BondLoss = .none
        /// Connects in a row that came up and dropped before services
        /// resolved, on a bonded device: the D-Bus-only sign of a refused
        /// bond where the kernel's reason cannot be heard.
        var dropsBeforeResolve = 0
        /// Controller checks made while searching since the dongle was last
        /// found: they pace the next one (`searchControllerCheck`, doubling),
        /// and with it the escalations they lead to on a controller that
        /// stays wedged.
        var searchChecks = 0
        /// StartDiscovery failures in this outage: they pace its retries.
        /// Counted here, not per state, because a cooldown's blind attempt
        /// every minute starts a new discovery: a controller that refuses
        /// every start costs a journal line a minute, not four.
        var discoveryFailures = 0
        /// The RemoveDevice in flight (its operation id), a stale object's or
        /// a refused bond's.
        var removal: Int?
        /// The controller check in flight (its operation id).
        var controllerCheck: Int?
    }

    enum BondLoss: Sendable, Equatable {
        case none
        /// Refused; its removal is asked for and not confirmed yet. No
        /// connect goes out while the device still holds the refused bond:
        /// each one is refused again (and on Debian 12's kernel each refusal
        /// has oopsed the kernel and killed bluetoothd in `make e2e`), so the
        /// attempts of the window ask for the removal instead until it is done.
        case removing
        /// Removed to pair again, in this outage.
        case renewed
        /// Reported, and not renewed (already renewed, or Tether does not
        /// pair): the windows go straight to cooling down, one blind attempt
        /// per cooldown, since every connect is refused. `problem`: what an
        /// operator must do (`Status.bondProblem`).
        case reported(problem: String)
    }

    /// What outlives every state and every outage: facts about the past
    /// that change how the next one is handled, the pacing of what stays
    /// broken across outages, and the counts `status` shows.
    struct History: Sendable {
        /// The link was online at least once (a later online is a reconnect).
        var hasBeenOnline = false
        /// Online sessions in a row that ended sooner than `stableLink`.
        var shortSessions = 0
        /// The last operation id handed out (every call that is answered).
        var operations = 0
        /// Adapter recovery rounds started since the adapter last stayed
        /// usable for `adapterRecoveryDelay`: they pace the next round, so a
        /// program that blocks the radio again as soon as Tether unblocks
        /// it meets one unblock per paced round, not a tug of war.
        var adapterRecoveries = 0
        /// Since when the adapter is usable (nil while it is not).
        var adapterUsableSince: Duration?
        /// When the dongle was last seen: a link of it went down, or it
        /// advertised. Nil: not since Tether started.
        var lastSeen: Duration?
        /// The evidence that the controller works, for telling an absent
        /// dongle from a fault: when it last answered a controller check,
        /// and when another device was last heard advertising.
        var controllerAnsweredAt: Duration?
        var othersHeardAt: Duration?
        /// For `status`: the last error, the times the link came back after
        /// being lost, and the times the silence limit passed.
        var lastError: String?
        var reconnects = 0
        var silenceEvents = 0
    }
}
