/// How the simulated dongle and bluetoothd behave. The defaults follow the
/// real hardware (Nordic dongle, BlueZ 5.66) except `disconnectDelay`, which is
/// shortened from bluetoothd's ~2 s so tests stay quick.
public struct SimulatorOptions: Sendable {
    /// The dongle's (random static) Bluetooth address; the device path is derived from it.
    public var address = "AA:BB:CC:DD:EE:FF"
    /// The name the dongle advertises (Device1.Name and Alias).
    public var name = "Tether-Dongle"
    /// The adapter's public address (Adapter1.Address).
    public var adapterAddress = "00:1A:7D:DA:71:13"
    /// Idle time (no GATT ReadValue/WriteValue) after which the connected dongle
    /// drops the link and goes to System OFF.
    public var sleepAfter: Duration = .seconds(30)
    /// How long the dongle advertises after entering the advertising state
    /// (start, wake, any link loss) before it goes to sleep.
    public var advertiseTimeout: Duration = .seconds(180)
    /// Telemetry notifications per second on the TX characteristic.
    public var notifyRate: Double = 10
    /// Time from Device1.Connect to its outcome.
    public var connectLatency: Duration = .milliseconds(30)
    /// Time from the Connect reply to the GATT objects and ServicesResolved.
    public var resolveDelay: Duration = .milliseconds(20)
    /// Time Device1.Disconnect takes on a connected device (bluetoothd: ~2 s).
    public var disconnectDelay: Duration = .milliseconds(100)
    /// How often discovery sees an advertisement (an RSSI update).
    public var advertisingInterval: Duration = .milliseconds(100)
    /// Other devices advertising on the same air (a busy street, other
    /// vehicles): discovery reports each with an RSSI update about once per
    /// `otherAdvertisingInterval`. 0: a quiet place.
    public var otherAdvertisers = 0
    public var otherAdvertisingInterval: Duration = .seconds(1)
    /// An identical dongle of another vehicle nearby: the same name and
    /// services at this address, 15 dB stronger, seen by discovery like the
    /// other advertisers. It takes no connection (Connect finds nobody, and
    /// the event log says `connect-request` with reason `twin`): a Tether
    /// that connects to it is at fault.
    public var twinAddress: String?
    /// The identity address a dongle using resolvable private addresses
    /// hands over when it bonds: after a pairing that bonds, Device1.Address
    /// becomes it (AddressType "public") on the same object, as bluetoothd
    /// does (bleak #1737). Nil: `address` is the dongle's identity.
    public var identityAddress: String?
    /// How long after RemoveDevice's reply InterfacesRemoved follows.
    /// bluetoothd deletes the object before it answers (a call on it then
    /// fails with UnknownObject) and announces the removal from its main
    /// loop's idle callback (gdbus `process_changes`): after the reply, by
    /// a millisecond or, under load, much more. The deterministic
    /// simulation draws 1 ms to 1 s per seed.
    public var removalSignalDelay: Duration = .milliseconds(1)
    /// Whether bluetoothd knows the device from an earlier connection, so its
    /// Device1 object exists from the start; if false it appears only when
    /// discovery sees it advertising.
    public var known = true
    /// Emit ServicesResolved=true before the GATT objects (they follow ~50 ms
    /// later), the race real BlueZ sometimes shows.
    public var resolvedBeforeObjects = false
    /// Leave Connected=true out of the signals (a Get still says true), as
    /// real bluetoothd 5.66 does when the ATT channel comes up before the
    /// kernel's Device Connected event: ServicesResolved=true is then the
    /// only sign of the connection.
    public var connectedUnsignalled = false
    /// Send the first notification after StartNotify in the same
    /// PropertiesChanged as Notifying=true, as bluetoothd does when the
    /// dongle notifies before its pending Notifying change went out (a
    /// Value change flushes the object's pending properties with it).
    public var valueWithNotifying = false
    /// BlueZ's GATT cache (main.conf `Cache`, default `always`): the GATT
    /// objects stay exported across link losses and only ServicesResolved
    /// goes false. With false, they are removed on every link loss (as with
    /// `Cache=no`), and exported again on the next connect.
    public var gattCache = true
    /// A dongle that does not advertise (asleep) does not answer a connect:
    /// the kernel gives up after its LE connect timeout, about 20 s, and the
    /// Connect fails then, unless the dongle wakes first (then it connects).
    public var noAnswerTimeout: Duration = .seconds(20)
    /// AcquireNotify: time from the CCCD write to the socket, during which
    /// bluetoothd drops the dongle's notifications ("Drop notification if the
    /// sock is not ready"). Zero makes the socket at once.
    public var acquireSocketDelay: Duration = .zero
    /// AcquireNotify: SO_SNDBUF of bluetoothd's end of the socket, in bytes;
    /// a small one makes a slow reader lose notifications sooner. Nil: the
    /// kernel's default.
    public var acquireSendBuffer: Int?
    /// BlueZ's ATT request timeout (`src/shared/att.c`, 30 s): a write
    /// request or a read the peer never answers fails then, with
    /// `org.bluez.Error.Failed` "Operation failed", and the ATT bearer (the
    /// link) is dropped. Only a hung application whose ATT is hung too
    /// (`hangApplication(attAnswers: false)`) leaves requests unanswered.
    public var attTimeout: Duration = .seconds(30)
    /// Behave as BlueZ ≥ 5.83: every link loss also sends
    /// `Device1.Disconnected(reason, message)` (5.66 sends nothing of the kind).
    public var disconnectedSignal = false
    /// The kernel's HCI command timeout (`HCI_CMD_TIMEOUT`, 2 s): with the
    /// controller locked up (`setLockup`), a call bluetoothd must pass to it
    /// fails after this.
    public var hciCommandTimeout: Duration = .seconds(2)
    /// Serve a simulated `/dev/rfkill` in this directory: the socket
    /// `DIR/rfkill` (connect with `SOCK_SEQPACKET`; `RfkillDevice` does when
    /// its path is a socket) and the class directory `DIR/class-rfkill`,
    /// whose `rfkillN/name` names the controller (`hci0`). Nil: none.
    public var rfkillDirectory: String?
    /// What the dongle asks before its GATT works: nothing (`.none`), an
    /// encrypted link paired with Just Works, or one paired by passkey entry
    /// (the dongle displays the passkey). See `DonglePairing`.
    public var pairing: DonglePairing = .none
    /// How long bluetoothd waits for an agent's answer (RequestPasskey,
    /// RequestAuthorization) before it gives up and sends the agent
    /// `Cancel()`: bluetoothd's REQUEST_TIMEOUT, 60 s.
    public var agentTimeout: Duration = .seconds(60)
    /// Where to append the JSON-lines event log, if anywhere.
    public var eventLogPath: String?
    /// Told every event as it is recorded, on the simulator's loop (the
    /// deterministic simulation's invariants read them as they happen).
    public var eventObserver: (@Sendable (SimulatorEvent) -> Void)?
    /// Whether events are also kept in memory (`Simulator.events`, up to
    /// `EventLog.memoryLimit`); a simulated year of them is not.
    public var keepsEventsInMemory = true

    public init() {}
}

/// What the dongle is doing, as the firmware sees it.
public enum DongleState: String, Sendable, Equatable, CaseIterable {
    /// Advertising and connectable (for `advertiseTimeout`).
    case advertising
    /// A central holds the link.
    case connected
    /// System OFF: not advertising; only a physical wake (`wake()`) brings it back.
    case asleep
}
