import LinkPolicy

extension Supervisor {
    public struct Settings: Sendable, Equatable {
        public var policy: ReconnectPolicy
        public var keepaliveEnabled: Bool
        public var keepaliveInterval: Duration
        public var keepaliveTimeout: Duration
        /// At least this long between polls that wait for bluetoothd's
        /// answer; the polls in between are sent without asking for one
        /// (`.pollWithoutReply`). Nil: every poll waits. Only for a write
        /// command, whose answer says no more than that bluetoothd runs and
        /// took the write: the dongle answers a command with nothing. An
        /// answer costs the daemon a second wake-up per poll, and a
        /// keep-alive every second is its whole idle load. The first poll of
        /// a link waits, so a write that bluetoothd refuses shows at once.
        public var keepaliveConfirmEvery: Duration?
        public var escalation: [EscalationStep]
        /// Failed link checks in a row that force a reconnect.
        public var failedPollsBeforeReconnect = 2
        /// While cooling down, the dongle counts as having woken up (and a
        /// fresh window opens) only when it advertises after this long
        /// without being seen. A dongle that advertises all along but refuses
        /// connections gets one blind attempt per cooldown, not an endless
        /// series of windows.
        public var advertisingSilence: Duration = .seconds(5)
        /// A link that drops sooner than this after coming online counts as
        /// flapping: each such drop in a row counts as a failed attempt of
        /// the next window, so a dongle that connects and drops at once backs
        /// off and, in the end, escalates and cools down like any failure.
        public var stableLink: Duration = .seconds(10)
        /// Wait before trying discovery again after it failed to start; it
        /// doubles with each failure of the outage, up to `discoveryRetryCap`.
        public var discoveryRetry: Duration = .seconds(5)
        public var discoveryRetryCap: Duration = .seconds(60)
        /// While searching, the controller is asked whether it answers after
        /// this long without finding the dongle, then after twice as long
        /// each time, up to `adapterRecoveryDelayCap`. A controller that
        /// wedged while discovering hears no advert, and nothing on D-Bus
        /// shows it: bluetoothd keeps `Powered` and `Discovering`, and a
        /// StartDiscovery it sends to the wedged controller answers
        /// `InProgress`, as if discovery already ran. Asked late, the dongle
        /// (which advertises ~180 s after a drop) would be asleep by the time
        /// the controller is recovered.
        public var searchControllerCheck: Duration = .seconds(30)
        /// The first pause before powering the adapter on again after an
        /// escalation left it off; it doubles after each try up to
        /// `adapterRecoveryDelayCap`, so a controller that refuses for good
        /// (wedged, and no USB step configured or none helped) costs a few
        /// journal lines an hour, not one every 10 s.
        public var powerOnRetry: Duration = .seconds(10)
        /// The pause after an adapter recovery round (rfkill unblock, USB
        /// reset or rebind of a controller that failed its initialisation)
        /// that left the adapter unusable; it doubles each round up to the
        /// cap, so a controller that never comes back costs one journal line
        /// per round, not a flood.
        public var adapterRecoveryDelay: Duration = .seconds(30)
        public var adapterRecoveryDelayCap: Duration = .seconds(600)
        /// After this many failed attempts of a window, the controller is
        /// asked (once per window) whether it still answers: a wedged one
        /// makes every attempt fail while bluetoothd says it is powered, and
        /// waiting out a whole window (minutes) would outlast the ~180 s a
        /// dropped dongle keeps advertising. Nil: never asked.
        public var controllerCheckAfterFailures: Int? = 2
        /// How long to wait, after the notification socket closed, for
        /// bluetoothd to report the link down before taking the link as up
        /// (someone else's StopNotify closed it) and connecting again.
        public var linkLossConfirmation: Duration = .seconds(2)
        /// Which device objects may be removed (Adapter1.RemoveDevice) after
        /// a retry window failed with errors that point at a stale object.
        public var staleDeviceRemoval: StaleDeviceRemoval = .unbonded
        /// No notification for this long while subscribed and the link is
        /// taken for dead (the dongle's application hung while its radio
        /// keeps the link): disconnect and reconnect. Nil: never; then
        /// `online` comes with the subscription, data or not.
        public var silenceLimit: Duration?
        /// Tether pairs with the dongle (`dongle.pairing` is not "never"):
        /// Device1.Pair when the device holds no bond, and once per outage
        /// again when the dongle refuses its bond.
        public var pairs = false
        /// Caps a Device1.Pair: bluetoothd's own bonding timeout is 120 s,
        /// but a pairing that works takes seconds (the agent answers at once).
        public var pairingTimeout: Duration = .seconds(30)
        /// Connects in a row that drop before services resolve, on a bonded
        /// device, taken for a refused bond when the kernel's reason is not
        /// heard.
        public var dropsBeforeResolveForBondLoss = 2
        /// After a window whose connects found nobody, the soonest the
        /// dongle is taken for away, however early the evidence that the
        /// controller works comes (others are heard within milliseconds in a
        /// busy place): a dongle that is there advertises within this
        /// (Nordic's connectable advertising: ≤ 1–2 s), and then the
        /// window was a fault (a stale object, RF trouble) and is handled as
        /// one, not as an absence followed by a second window at once (the
        /// soak once saw twelve connects in ten seconds that way).
        public var awayVerdictAfter: Duration = .seconds(3)
        /// After a window whose connects found nobody, with no evidence yet
        /// that the controller works: how long to listen for some (another
        /// device's advertisement, an answered controller check) before
        /// taking the window for a fault after all.
        public var awayListen: Duration = .seconds(10)
        /// While away, where other devices were heard: none heard for this
        /// long means the scan stalled (BlueZ's LE scan can stop delivering
        /// advertisements while `Discovering` stays true): discovery is
        /// started again, and if the next period hears nobody either, the
        /// controller steps run. Home Assistant restarts its scanner after
        /// 90 to 120 s of silence.
        public var scanStallAfter: Duration = .seconds(120)
        /// While away in a quiet place (nobody heard), the discovery session
        /// is renewed this often: there, silence cannot tell a stalled scan.
        public var discoveryRenewal: Duration = .seconds(600)

        public init(
            policy: ReconnectPolicy, keepaliveEnabled: Bool = true, keepaliveInterval: Duration = .seconds(5),
            keepaliveTimeout: Duration = .seconds(3), escalation: [EscalationStep] = []
        ) {
            self.policy = policy
            self.keepaliveEnabled = keepaliveEnabled
            self.keepaliveInterval = keepaliveInterval
            self.keepaliveTimeout = keepaliveTimeout
            self.escalation = escalation
        }
    }
}
