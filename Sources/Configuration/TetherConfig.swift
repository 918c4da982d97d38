import LinkPolicy
import PayloadLayout

/// The daemon's configuration: which dongle to keep connected, how to keep it awake,
/// how to reconnect, and where to log readings. Build one from TOML with `load`/`parse`,
/// or in code with `defaults(address:)` and then adjust fields.
public struct TetherConfig: Sendable, Equatable {
    public struct BlueZSection: Sendable, Equatable {
        /// Adapter name such as "hci0"; nil means the first powered adapter
        /// (or the one with `adapterAddress`).
        public var adapter: String?
        /// The controller's address, normalised "AA:BB:CC:DD:EE:FF": the
        /// form to use on a gateway, since a USB replug or reset can give
        /// the controller another index (the kernel hands out the lowest
        /// free one) and only its address stays.
        public var adapterAddress: String?

        public init(adapter: String? = nil, adapterAddress: String? = nil) {
            self.adapter = adapter
            self.adapterAddress = adapterAddress
        }

        /// How the config names the adapter, for messages.
        public var adapterDescription: String? { adapterAddress ?? adapter }
    }

    public struct DongleSection: Sendable, Equatable {
        /// Normalised "AA:BB:CC:DD:EE:FF".
        public var address: String?
        public var namePrefix: String?
        /// Normalised lowercase 128-bit UUID.
        public var serviceUUID: String?
        /// Characteristics to subscribe to (normalised UUIDs, never empty after validation).
        public var notify: [String]
        /// How notifications reach the daemon.
        public var notifyPath: NotifyPath
        /// `dongle.silence_limit`: how long the dongle may go without a
        /// notification while subscribed (`TetherConfig.silenceLimit`).
        public var silenceLimit: SilenceLimit
        /// `dongle.pairing` (with `dongle.passkey_file`): whether Tether
        /// pairs with the dongle, and how.
        public var pairing: Pairing = .never

        public init(
            address: String? = nil, namePrefix: String? = nil, serviceUUID: String? = nil,
            notify: [String] = [ConfigUUID.nusTX], notifyPath: NotifyPath = .default,
            silenceLimit: SilenceLimit = .automatic
        ) {
            self.address = address
            self.namePrefix = namePrefix
            self.serviceUUID = serviceUUID
            self.notify = notify
            self.notifyPath = notifyPath
            self.silenceLimit = silenceLimit
        }
    }

    /// `dongle.pairing`: whether Tether pairs with the dongle (registering an
    /// Agent1 of its own, calling Device1.Pair when the device holds no bond,
    /// and pairing again once when the dongle lost its keys), and how.
    public enum Pairing: Sendable, Equatable {
        /// Tether never pairs: a dongle that needs encryption must be paired
        /// by hand (bluetoothctl), and a lost bond is only reported.
        case never
        /// LE Just Works: no passkey; the agent's capability is NoInputNoOutput.
        case justWorks
        /// Passkey entry: the dongle displays (or has printed on it) a fixed
        /// six-digit passkey, which only `tether run` reads from `source`
        /// (`loadPasskey`); the agent's capability is KeyboardOnly. Needs
        /// `dongle.address`.
        case passkey(PasskeySource)

        /// The config's spelling.
        public var name: String {
            switch self {
            case .never: "never"
            case .justWorks: "just-works"
            case .passkey: "passkey-file"
            }
        }

        public var pairs: Bool { self != .never }

        /// How a pairing is made, as the `paired` log line names it.
        public var method: String {
            switch self {
            case .never, .justWorks: "just-works"
            case .passkey: "passkey"
            }
        }
    }

    /// Where `tether run` reads the passkey from.
    public enum PasskeySource: Sendable, Equatable, CustomStringConvertible {
        /// `dongle.passkey_file`.
        case file(String)
        /// No `passkey_file`: systemd's credential `passkey`
        /// (`$CREDENTIALS_DIRECTORY/passkey`, from `LoadCredential=`).
        case credential

        public var description: String {
            switch self {
            case .file(let path): path
            case .credential: "systemd's credential \"\(PasskeyFile.credentialName)\""
            }
        }
    }

    /// `dongle.silence_limit`. Only notifications prove the dongle works: its
    /// radio stack keeps the link and answers ATT while its application is
    /// hung, so neither the link nor a keep-alive write says anything.
    public enum SilenceLimit: Sendable, Equatable {
        /// Absent from the file: `defaultSilenceLimit`, or two keep-alive
        /// intervals when that is longer (a dongle that notifies only when
        /// polled must not trip it).
        case automatic
        /// "off": never judged; `online` then means subscribed.
        case off
        case after(Duration)
    }

    public static let defaultSilenceLimit: Duration = .seconds(20)

    /// The silence limit in force, nil when off.
    public var silenceLimit: Duration? {
        switch dongle.silenceLimit {
        case .off: nil
        case .after(let limit): limit
        case .automatic: keepalive.enabled ? max(Self.defaultSilenceLimit, keepalive.interval * 2) : Self.defaultSilenceLimit
        }
    }

    /// `dongle.notify_path`: how notifications travel from bluetoothd.
    public enum NotifyPath: String, Sendable, Equatable, CaseIterable {
        /// StartNotify: each notification is a PropertiesChanged signal
        /// routed by dbus-daemon. bluetoothd re-arms the session itself after
        /// a reconnect, and notifications that arrive before the session is
        /// ready are still signalled.
        case startNotify = "start-notify"
        /// AcquireNotify: bluetoothd writes each notification to a socket of
        /// our own; dbus-daemon is out of the path. Acquired again after
        /// every reconnect; bluetoothd drops what arrives before the socket
        /// exists (right after the CCCD write).
        case acquireNotify = "acquire-notify"
        /// AcquireNotify where bluetoothd offers it (NotifyAcquired is
        /// exported) and nobody else holds a notify session; StartNotify
        /// otherwise.
        case auto

        public static let `default`: NotifyPath = .startNotify
    }

    public enum WriteType: String, Sendable, Equatable {
        /// Write without response: cheapest on air, nothing to time out on.
        case command
        /// Write with response: proves the link end to end.
        case request
    }

    public struct KeepAliveSection: Sendable, Equatable {
        public var enabled: Bool
        public var interval: Duration
        public var characteristic: String
        /// Bytes to write on each poll; nil means poll with a read instead.
        public var write: [UInt8]?
        public var writeType: WriteType
        public var timeout: Duration
        /// How long the dongle stays awake without traffic.
        public var sleepAfter: Duration
        /// A write command's polls wait for bluetoothd's answer at least
        /// this often, and are sent without asking for one in between;
        /// zero: every poll waits. Reads and write requests always wait.
        public var confirmEvery: Duration

        /// Whether each poll waits for bluetoothd's answer: a read (the
        /// answer is the reading), a write request (the dongle's answer),
        /// or `confirm_every` of zero.
        public var confirmsEveryPoll: Bool {
            write == nil || writeType != .command || confirmEvery == .zero
        }

        public init(
            enabled: Bool = true,
            interval: Duration = .seconds(5),
            characteristic: String = ConfigUUID.nusRX,
            write: [UInt8]? = [0x00],
            writeType: WriteType = .command,
            timeout: Duration = .seconds(3),
            sleepAfter: Duration = .seconds(30),
            confirmEvery: Duration = .seconds(5)
        ) {
            self.enabled = enabled
            self.interval = interval
            self.characteristic = characteristic
            self.write = write
            self.writeType = writeType
            self.timeout = timeout
            self.sleepAfter = sleepAfter
            self.confirmEvery = confirmEvery
        }
    }

    /// The supervisor's escalation steps, spelled as in `reconnect.escalate`.
    public typealias EscalationStep = LinkPolicy.EscalationStep

    /// `[reconnect]`: the retry policy's keys, plus the escalation steps.
    /// The policy's fields read and write through this section
    /// (`config.reconnect.window`), so their defaults live in one place.
    @dynamicMemberLookup
    public struct ReconnectSection: Sendable, Equatable {
        public var policy: ReconnectPolicy
        public var escalate: [EscalationStep]
        /// `remove_stale_device`: which device objects may be removed after a
        /// window failed with errors that point at a stale object.
        public var removeStaleDevice: StaleDeviceRemoval
        /// `scan_stall_after`: while the dongle is away or searched for,
        /// no advertisement from anyone for this long (where others were
        /// heard) is a stalled scan.
        public var scanStallAfter: Duration
        /// `uart_unit`: the unit `uart-reattach` restarts, the one that
        /// attaches the UART controller.
        public var uartUnit: String = "hciuart.service"

        public init(
            policy: ReconnectPolicy = ReconnectPolicy(), escalate: [EscalationStep] = [],
            removeStaleDevice: StaleDeviceRemoval = .unbonded, scanStallAfter: Duration = .seconds(120)
        ) {
            self.policy = policy
            self.escalate = escalate
            self.removeStaleDevice = removeStaleDevice
            self.scanStallAfter = scanStallAfter
        }

        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<ReconnectPolicy, Value>) -> Value {
            get { policy[keyPath: keyPath] }
            set { policy[keyPath: keyPath] = newValue }
        }
    }

    public struct ReadingsSection: Sendable, Equatable {
        public var directory: String
        public var flushInterval: Duration
        public var rotateSize: Int64
        public var retainSize: Int64
        /// Readings held in memory while the disk refuses writes.
        public var maxBacklog: Int

        public init(
            directory: String = "/var/lib/tether/readings",
            flushInterval: Duration = .seconds(1),
            rotateSize: Int64 = 64 << 20,
            retainSize: Int64 = 1 << 30,
            maxBacklog: Int = 100_000
        ) {
            self.directory = directory
            self.flushInterval = flushInterval
            self.rotateSize = rotateSize
            self.retainSize = retainSize
            self.maxBacklog = maxBacklog
        }
    }

    public var bluez: BlueZSection
    public var dongle: DongleSection
    public var keepalive: KeepAliveSection
    public var reconnect: ReconnectSection
    public var readings: ReadingsSection
    /// Where `tether forward` delivers the readings; nil without an [mqtt] table.
    public var mqtt: MQTTSection?
    /// Prometheus textfiles; off unless a path is given.
    public var metrics: MetricsSection
    /// The payload's declared fields (`[decode]`); nil: records carry hex alone.
    public var decode: PayloadLayout?
    /// Settings that work but are likely not what the operator wants
    /// (`tether check-config` prints them, `tether run` logs them).
    public var warnings: [ConfigError] { notes.warnings }
    var notes = FileNotes()

    /// What the file said beyond the settings. Not part of a config's
    /// identity: the same settings from another file (other line numbers)
    /// are the same config.
    struct FileNotes: Sendable, Equatable {
        var warnings: [ConfigError] = []
        /// Where a passkey problem found after parsing (`loadPasskey`,
        /// `checkPasskeyFile`) is reported: `passkey_file`'s line, or
        /// `pairing`'s for the credential.
        var passkeyLocation: (file: String, line: Int?, key: String)?
        static func == (_: FileNotes, _: FileNotes) -> Bool { true }
    }

    public static let defaultPath = "/etc/tether/tether.toml"

    public init(
        bluez: BlueZSection = BlueZSection(),
        dongle: DongleSection,
        keepalive: KeepAliveSection = KeepAliveSection(),
        reconnect: ReconnectSection = ReconnectSection(),
        readings: ReadingsSection = ReadingsSection(),
        mqtt: MQTTSection? = nil,
        metrics: MetricsSection = MetricsSection()
    ) {
        self.mqtt = mqtt
        self.metrics = metrics
        self.bluez = bluez
        self.dongle = dongle
        self.keepalive = keepalive
        self.reconnect = reconnect
        self.readings = readings
    }

    /// The configuration a file containing only `[dongle] address = "…"` produces.
    /// The address is normalised when valid and kept as given otherwise.
    public static func defaults(address: String) -> TetherConfig {
        TetherConfig(dongle: DongleSection(address: BluetoothAddressText.normalize(address) ?? address))
    }
}
