import BlueZ
import DBus
import DurationUnits
import EventLoop
import Foundation
import Rfkill

/// A simulated bluetoothd with one adapter and one Nordic NUS dongle, on a
/// given bus. It owns `org.bluez` (on a connection that can "crash") and
/// `io.tether.Simulator` (on a second connection that survives crashes).
///
/// The actor's state is the single source of truth; bus objects mirror it.
/// Every state change happens synchronously before the first suspension that
/// follows it, and the signals announcing it go out in one hop onto the bus's
/// serial executor, so signals leave in the order the changes happened.
/// Call `stop()` when done: it closes both connections and cancels every task.
///
/// Threading: the actor runs on an `EventLoop` (`loop`, its executor), and
/// reads the time only from it (`loop.now`, its timers): on virtual loops
/// (`start(connect:loops:options:)`) a run repeats exactly, on virtual
/// time. Every task it starts prefers that loop (`spawn`), so nothing of
/// it reaches Swift's global executor (Simulator+Tasks.swift). Callers of
/// its methods on virtual loops call from tasks that prefer one of them.
public actor Simulator {
    // MARK: Configuration

    let options: SimulatorOptions
    /// Makes a bus connection on the given loop: each bluetoothd
    /// incarnation's, and the control connection.
    let connect: @Sendable (EventLoop) async throws(DBusError) -> Bus
    /// The dongle's GATT database now (its firmware's layout).
    var gatt: GattDatabase
    /// The database whose objects bluetoothd exported, while they are on the
    /// bus; after a layout change between connections it differs from `gatt`
    /// until the next connection's discovery replaces them.
    var exportedGatt: GattDatabase?
    /// The device object bluetoothd holds is stale: connects to it fail with
    /// le-connection-abort-by-local until it is removed (RemoveDevice).
    var staleDevice = false
    /// The adapter's object (its kernel index: a replug can change it) and
    /// the dongle's under it.
    var adapterPath: ObjectPath = AdapterObject.path
    var devicePath: ObjectPath
    var adapterAddress: String
    /// The controller is in the kernel (and so in bluetoothd).
    var adapterPresent = true

    var connectLatency: Duration
    var gattLatency: Duration = .zero
    var notifyRate: Double
    /// Where the simulated rfkill is served (`options.rfkillDirectory`), for
    /// the daemon's `RfkillSource`; nil when it is not.
    public nonisolated let rfkill: RfkillSource?

    // MARK: Connections

    /// The loop the actor runs on (its executor), with the control connection.
    nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    /// The current bluetoothd incarnation; nil while "crashed".
    var bluez: Bus?
    /// bluetoothd's main loop: each incarnation's connection runs on it, and
    /// only on it, so that holding it hangs bluetoothd alone (`hang(for:)`).
    let bluezLoop: EventLoop
    /// How `hang(for:)` holds `bluezLoop` (`SimulatorLoops.freeze`).
    let freezeBluezLoop: (@Sendable (EventLoop, Duration) -> Void)?
    /// `start(busAddress:options:)` made `bluezLoop`, and `stop()` ends it.
    let ownsBluezLoop: Bool
    var control: Bus?
    /// Bumped whenever bluetoothd goes away, so that work begun by an older
    /// incarnation (a pending Disconnect) does not act on the new one.
    var generation = 0
    var stopped = false

    // MARK: Adapter

    var powered = true
    /// The last power change (`changePower`), which the next one waits for.
    var powerChange: Task<DBusError?, Never>?
    var discoveryClients: Set<String> = []
    var discoveryFilters: [String: DiscoveryFilter] = [:]
    var discovering = false
    /// A StopDiscovery's management command is queued, not yet answered
    /// (`managementRoundTrip`); a Connect meanwhile stops the scan in the
    /// kernel first (`connectStoppedScan`), and the command is rejected.
    var discoveryStopQueued = false
    var connectStoppedScan = false
    static let managementRoundTrip: Duration = .milliseconds(10)

    // MARK: Controller: rfkill and lockup

    /// The simulated `/dev/rfkill` (nil without `options.rfkillDirectory`).
    var rfkillServer: RfkillServer?
    var rfkillWrites: Task<Void, Never>?
    /// The controller's rfkill switch: the kernel numbers switches in the
    /// order they register, so a controller that comes back gets a new one.
    var rfkillIndex: UInt32 = 0
    var nextRfkillIndex: UInt32 = 1
    var softBlocked = false
    var hardBlocked = false
    /// Another program holds the soft block (`setRfkill(held:)`): it blocks
    /// again at once whenever a client clears it.
    var softBlockHeld = false
    /// The controller stopped answering (`setLockup`); nil while it answers.
    var lockup: Lockup?
    /// bluetoothd still believes in a link that the locked-up controller
    /// lost: Device1.Connected stays true, the dongle advertises.
    var ghostLink = false
    /// RemoveDevice calls waiting for that link to end.
    var ghostLinkWaits: [Int] = []

    struct Lockup {
        /// An Adapter1.Powered cycle (or an rfkill block and unblock) clears
        /// it: the HCI Reset of opening the controller again gets it going.
        let clearsOnPowerCycle: Bool
        /// The kernel's connection to the dongle that bluetoothd let go of
        /// when its Disconnect timed out on the locked-up controller (a
        /// Connect meanwhile fails at once). It is the lockup's: it lasts
        /// until the lockup ends or the controller is closed.
        var kernelHoldsLink = false
    }

    // MARK: Device

    var dongle: SimulatedDongle
    /// Whether bluetoothd remembers the device (known at start, or connected
    /// once): it is exported again after a restart.
    var deviceKnown: Bool
    var deviceExported = false
    /// A removed device object whose InterfacesRemoved is still to be sent
    /// (`SimulatorOptions.removalSignalDelay`): its path and interfaces.
    var removalUnannounced: (path: ObjectPath, interfaces: [String])?
    var rssiPublished = false
    /// The other advertisers discovery has made objects for (forgotten with
    /// the adapter or with bluetoothd: `forgetStrangers`), and the next to report.
    var othersExported: Set<Int> = []
    var othersCursor = 0
    var twinExported = false
    /// The scan delivers nothing (`stallScan`), until what lifts it.
    var scanStall: ScanStall?
    /// The dongle's DFU bootloader advertises in its place (`setBootloader`).
    var bootloaderAdvertising = false
    var bootloaderExported = false
    /// The address Device1 shows: the identity address once a bond gave it.
    var shownAddress: String
    /// Other advertisers now on the air (`SimulatorOptions.otherAdvertisers`,
    /// changed by the `SetOtherAdvertisers` knob).
    var otherAdvertisers = 0
    /// Identifies the current link; delayed work checks it to see whether the
    /// link it belongs to is still up.
    var linkID = 0
    var pendingConnect: PendingConnect?
    /// The GATT objects are on the bus (with BlueZ's default GATT cache they
    /// stay there across link losses).
    var gattExported = false
    /// The current link has its services resolved: GATT calls and
    /// notifications work.
    var servicesResolved = false
    /// Notify sessions by characteristic path: the unique names of the
    /// clients holding them. They outlive the link (and the exported objects).
    var notifySessions: [ObjectPath: Set<String>] = [:]
    /// The sessions among `notifySessions` that are registered with no GATT
    /// client: the link dropped since they were made (gatt-client.c
    /// `clear_notify_id`), or they were made while disconnected. The next
    /// link's ATT channel registers them again (`btd_gatt_client_connected`);
    /// until then their client's StartNotify is answered `InProgress`.
    var dormantNotifySessions: [ObjectPath: Set<String>] = [:]
    /// Characteristics whose first session was made with no link: they turn
    /// Notifying=true when the next link enables it (register_notify_cb).
    var notifyingOnNextLink: Set<ObjectPath> = []
    /// Acquired notifications (AcquireNotify) by characteristic path; they
    /// end with the link.
    var notifyAcquisitions: [ObjectPath: NotifyAcquisition] = [:]
    var hangupWatches: [Int32: WatchBox] = [:]
    /// The dongle's application is hung while its radio stack keeps the link
    /// (`hangApplication`); nil when it runs. The value: whether the stack
    /// still answers ATT requests (a Nordic SoftDevice does without the
    /// application), or they go unanswered too.
    var applicationHung: (attAnswers: Bool, since: MonotonicInstant)?
    /// AcquireNotify calls waiting for the link's services (GATT ready).
    var servicesResolvedWaiters: [CheckedContinuation<Bool, Never>] = []
    /// Released acquisitions whose NotifyAcquired=false is still to be sent.
    var releasedToAnnounce: [ObjectPath] = []

    struct PendingConnect {
        let waitID: Int
        let client: String
    }

    // MARK: Agents, pairing and bonds (Simulator+Pairing.swift)

    /// bluetoothd's agents, by their owner's unique name (one each).
    var agents: [String: RegisteredAgent] = [:]
    /// Owners of the default agents, the default first (src/agent.c's
    /// `default_agents`): the first agent registered, or the last to call
    /// RequestDefaultAgent.
    var defaultAgentOwners: [String] = []
    /// What bluetoothd keeps about the device "on disk": it survives clients
    /// leaving, link losses and bluetoothd restarts; RemoveDevice deletes it.
    var paired = false
    /// The key is persistent (both sides asked for bonding, which bluetoothd
    /// does only while a default agent exists). A pairing without it lasts
    /// one connection.
    var bonded = false
    var trusted = false
    /// The dongle holds the key of its bond with this adapter (false after
    /// `forgetKeys()`, its factory reset).
    var dongleHasKey = false
    /// The current link is encrypted (with a stored key or a fresh pairing).
    var linkEncrypted = false
    /// A Device1.Pair being served (connecting first, or pairing).
    var pairCall: (id: Int, client: String)?
    /// The SMP pairing under way, Pair's or bluetoothd's security
    /// elevation; GATT requests that need encryption wait for it.
    var pairing: (id: Int, task: Task<PairingOutcome, Never>)?
    /// The agent call bluetoothd is waiting on (one at a time).
    var agentRequest: PendingAgentRequest?

    // MARK: Log and published state

    var log: EventLog
    var publishedState: DongleState?
    var publishedConnects: UInt32?

    // MARK: Tasks

    /// Waits inside method calls (connect latency, disconnect delay), by id,
    /// so Disconnect can cut a pending connect short and stop() can end them.
    var waits: [Int: Task<Void, Never>] = [:]
    var nextWaitID = 0
    var resolveTask: Task<Void, Never>?
    var telemetryTask: Task<Void, Never>?
    var idleTask: Task<Void, Never>?
    var advertisingTask: Task<Void, Never>?
    var advertisingEpoch = 0
    var scanTask: Task<Void, Never>?
    var clientWatchTask: Task<Void, Never>?
    var restartTask: Task<Void, Never>?

    /// Checks the options; `start` connects.
    init(
        connect: @escaping @Sendable (EventLoop) async throws(DBusError) -> Bus, loops: SimulatorLoops, ownsBluezLoop: Bool,
        options: SimulatorOptions
    ) throws {
        loop = loops.simulator
        bluezLoop = loops.bluetoothd
        freezeBluezLoop = loops.freeze
        self.ownsBluezLoop = ownsBluezLoop
        self.connect = connect
        if case .passkey(let passkey) = options.pairing, passkey > DonglePairing.maximumPasskey {
            throw SimulatorError.invalidPasskey(passkey)
        }
        self.options = options
        shownAddress = options.address
        otherAdvertisers = max(0, options.otherAdvertisers)
        devicePath = try DeviceObject.path(adapter: AdapterObject.path, address: options.address)
        adapterAddress = options.adapterAddress.uppercased()
        gatt = try GattDatabase(devicePath: devicePath)
        connectLatency = options.connectLatency
        notifyRate = Self.sanitizedRate(options.notifyRate)
        dongle = SimulatedDongle(now: loops.simulator.now)
        deviceKnown = options.known
        log = try EventLog(
            path: options.eventLogPath, clock: loops.simulator.clock, observer: options.eventObserver,
            keepsInMemory: options.keepsEventsInMemory)
        rfkill = options.rfkillDirectory.map { RfkillSource(device: $0 + "/rfkill", sysfs: $0 + "/class-rfkill") }
    }

    // MARK: Knobs

    /// Drops the link as an RF loss would; the dongle goes back to advertising.
    public func dropLink(reason: String) async {
        guard !stopped else { return }
        await loseLink(reason: reason.isEmpty ? "link-loss" : reason, asleep: false)
    }

    /// Sends the dongle to System OFF (dropping the link if there is one).
    public func sleep() async {
        guard !stopped else { return }
        switch dongle.state {
        case .connected:
            await loseLink(reason: "sleep", asleep: true)
        case .advertising:
            fallAsleep(reason: "sleep")
            await publishControl()
        case .asleep:
            break
        }
    }

    /// The physical wake: an asleep dongle starts advertising again.
    public func wake() async {
        guard !stopped, dongle.wake() else { return }
        log.record(.wake)
        enterAdvertising()
        // A connect that was waiting for an answer gets one now.
        if let pending = pendingConnect { cancelWait(pending.waitID) }
        await publishControl()
    }

    /// Makes the next `count` connect attempts fail with this error (after
    /// the connect latency). 0 clears it.
    public func failNextConnects(_ count: Int, errorName: String, message: String) {
        dongle.failNextConnects(count, errorName: errorName, message: message)
    }

    public func setConnectLatency(_ latency: Duration) {
        connectLatency = max(.zero, latency)
    }

    /// How long a GATT write request takes to reach the dongle and be
    /// answered (a slow air, a busy controller); zero by default.
    public func setGattLatency(_ latency: Duration) {
        gattLatency = max(.zero, latency)
    }

    /// A connect left pending in bluetoothd by a client that is gone (one
    /// killed while its Connect waited, or an HCI reset mid-connect): every
    /// Connect answers InProgress until a Disconnect cancels it.
    public func leaveConnectPending() {
        guard !stopped, pendingConnect == nil, dongle.state != .connected else { return }
        pendingConnect = PendingConnect(waitID: makeWaitID(), client: "a client that is gone")
        log.record(.connectRequest) { $0.reason = "left-pending" }
    }

    /// The dongle's application hangs; its radio keeps the link. No
    /// notification goes out, writes without response are accepted, the
    /// firmware's idle-sleep timer stops with the application. With
    /// `attAnswers` write requests and reads are answered as before (the
    /// SoftDevice does that); without, they wait for BlueZ's ATT timeout.
    public func hangApplication(attAnswers: Bool) {
        applicationHung = (attAnswers, loop.now)
        log.record(.applicationHung) { $0.reason = attAnswers ? "att-answers" : "att-hung" }
        updateTelemetry()
    }

    /// The application runs again (after the dongle's watchdog, say): on a
    /// link that is still up and subscribed, notifications go on with the
    /// next sequence number; the idle clock starts from now.
    public func resumeApplication() {
        guard applicationHung != nil else { return }
        applicationHung = nil
        dongle.noteActivity(at: loop.now)
        log.record(.applicationResumed)
        updateTelemetry()
    }

    /// A firmware update moves the dongle's handles: the layout switches
    /// between the shipped one and one with the Secure DFU service first.
    /// While connected the dongle indicates Service Changed and bluetoothd
    /// replaces its objects at once; otherwise the cached objects stay until
    /// the next connection's discovery replaces them.
    public func changeGattLayout() async {
        guard !stopped, let changed = try? GattDatabase(devicePath: devicePath, layout: gatt.layout == 0 ? 1 : 0) else { return }
        gatt = changed
        let connected = dongle.state == .connected && gattExported
        log.record(.gattChanged) { $0.reason = connected ? "service-changed" : "between-connections" }
        if connected, let old = exportedGatt, old.layout != gatt.layout {
            await replaceGattObjects(old, reason: "service-changed")
        }
    }

    /// Makes the device object bluetoothd holds stale (as after a controller
    /// reset left it half-forgotten): every Connect fails with
    /// `le-connection-abort-by-local` until the object is removed with
    /// `Adapter1.RemoveDevice`; the one discovery creates then works.
    public func setStaleDevice(_ stale: Bool) {
        staleDevice = stale
        log.record(.staleDevice) { $0.on = stale }
    }

    /// The controller leaves the kernel (unplugged, or reset off the bus):
    /// bluetoothd removes the device objects (the dongle's and every
    /// stranger's) and the adapter's (InterfacesRemoved), every session with
    /// them; the dongle's link drops.
    public func removeAdapter() async {
        guard !stopped, adapterPresent else { return }
        adapterPresent = false
        log.record(.adapterRemoved) { $0.reason = adapterPath.rawValue }
        var paths = gattExported ? (exportedGatt ?? gatt).removalOrder : []
        if deviceExported { paths.append(devicePath) }
        paths += forgetStrangers()
        paths.append(adapterPath)
        forgetAdapterState(reason: "adapter-removed")
        // The controller goes, and its rfkill switch and lockup with it.
        clearLockup(reason: "adapter-removed")
        removeRfkillSwitch()
        await bluez?.unexportObjects(paths)
        await publishControl()
    }

    /// A controller comes (back) as `name` (`hci1`) with `address`: bluetoothd
    /// exports the adapter, powered (AutoEnable), and the devices it stored
    /// for that address (the dongle, if it had been connected through it).
    public func addAdapter(name: String, address: String) async throws {
        guard !stopped, !adapterPresent else { return }
        guard let path = AdapterObject.path(name: name), DeviceObject.isValidAddress(address) else {
            throw SimulatorError.invalidAddress("\(name) \(address)")
        }
        let sameController = address.uppercased() == adapterAddress
        adapterPath = path
        adapterAddress = address.uppercased()
        devicePath = try DeviceObject.path(adapter: path, address: options.address)
        gatt = try GattDatabase(devicePath: devicePath, layout: gatt.layout)
        if !sameController {
            // Another controller: bluetoothd has no record of the dongle under it.
            deviceKnown = false
            forgetBond()
        }
        adapterPresent = true
        powered = true
        log.record(.adapterAdded) { $0.reason = "\(name) \(adapterAddress)" }
        addRfkillSwitch()
        guard let bus = bluez else { return }
        try? await bus.export(adapterPath, [AdapterObject.interface(adapterSnapshot, simulator: self)])
        if deviceKnown {
            await announceRemovalIfPending()
            deviceExported = true
            try? await bus.export(devicePath, [deviceInterface(rssi: nil)])
        }
    }

    /// Notifications per second; 0 stops them. Takes effect at once.
    public func setNotifyRate(_ perSecond: Double) {
        notifyRate = Self.sanitizedRate(perSecond)
        telemetryTask?.cancel()
        telemetryTask = nil
        updateTelemetry()
    }

    // MARK: Observing

    public var state: DongleState { dongle.state }
    public var events: [SimulatorEvent] { log.events }
    /// The sequence number of the last notification sent (0 before any).
    public var lastSequence: UInt32 { dongle.sequence }
    /// Successful connects so far.
    public var connectCount: Int { Int(dongle.connects) }
    /// The controller is locked up (`setLockup`).
    public var isLockedUp: Bool { lockup != nil }
    /// The unique name of the current bluetoothd connection, nil while it is down.
    public var bluezUniqueName: String? {
        get async { await bluez?.uniqueName }
    }

    // MARK: Helpers shared by the extensions

    /// Notification rates are clamped to what a BLE link could carry (and
    /// the simulator's arithmetic can hold): 0 … 20,000 per second.
    static func sanitizedRate(_ rate: Double) -> Double {
        rate.isFinite ? min(max(0, rate), 20_000) : 0
    }

    func ensureRunning() throws(DBusError) {
        if stopped { throw BlueZFault.failed("bluetoothd is shutting down") }
    }

    var adapterSnapshot: AdapterObject.Snapshot {
        AdapterObject.Snapshot(address: adapterAddress, powered: powered, discovering: discovering)
    }

    func deviceInterface(rssi: Int16?) -> ExportedInterface {
        DeviceObject.interface(
            DeviceObject.Snapshot(
                address: shownAddress, name: options.name, connected: dongle.state == .connected, rssi: rssi,
                adapter: adapterPath, paired: paired, bonded: bonded, trusted: trusted
            ),
            simulator: self
        )
    }

    var controlSnapshot: ControlInterface.Snapshot {
        ControlInterface.Snapshot(state: dongle.state, sequence: dongle.sequence, connects: dongle.connects)
    }

    func setDeviceProperties(_ changes: [String: DBusValue], invalidated: [String] = [], emitSignal: Bool = true) async {
        guard let bus = bluez, deviceExported else { return }
        try? await bus.setProperties(devicePath, BlueZ.deviceInterface, changes, invalidated: invalidated, emitSignal: emitSignal)
    }

    func setAdapterProperties(_ changes: [String: DBusValue]) async {
        try? await bluez?.setProperties(adapterPath, BlueZ.adapterInterface, changes)
    }

    /// Pushes State and Connects to the control object (PropertiesChanged)
    /// when they changed.
    func publishControl() async {
        var changes: [String: DBusValue] = [:]
        if publishedState != dongle.state {
            publishedState = dongle.state
            changes["State"] = .string(dongle.state.rawValue)
        }
        if publishedConnects != dongle.connects {
            publishedConnects = dongle.connects
            changes["Connects"] = .uint32(dongle.connects)
        }
        changes["Sequence"] = .uint64(UInt64(dongle.sequence))
        guard let control, changes.count > 1 else { return }
        try? await control.setProperties(SimulatorControl.path, SimulatorControl.interface, changes)
    }

    /// Sequence changes with every notification: it is kept current for Get
    /// but not announced, or the control connection would carry a second
    /// notification stream.
    func publishSequence() async {
        try? await control?.setProperties(
            SimulatorControl.path, SimulatorControl.interface, ["Sequence": .uint64(UInt64(dongle.sequence))],
            emitSignal: false
        )
    }
}

