import Foundation

/// One entry of the simulator's event log: a JSON line such as
/// `{"t":1234.567,"ev":"connect-failed","error":"org.bluez.Error.Failed","message":"le-connection-abort-by-local"}`.
///
/// `t` is milliseconds since the simulator started, on its loop's clock
/// (monotonic, or a simulation's virtual time);
/// the other fields appear only on the events they belong to.
public struct SimulatorEvent: Codable, Sendable, Equatable {
    public var t: Double
    public var ev: String
    /// The D-Bus unique name of the calling client.
    public var client: String?
    /// The characteristic's UUID (read, write, start-notify, stop-notify).
    public var uuid: String?
    /// Written bytes, lowercase hex.
    public var hex: String?
    /// Write type: command, request or reliable.
    public var type: String?
    /// Notification sequence number.
    public var seq: UInt32?
    /// D-Bus error name of a failed connect.
    public var error: String?
    public var message: String?
    /// Why the link dropped (disconnected) or a session ended.
    public var reason: String?
    /// Adapter power (power; reason: rfkill or rfkill-unblock when rfkill
    /// changed it, error when a power-on was refused), a lockup's state.
    public var on: Bool?
    /// A write whose caller asked for no answer (D-Bus NO_REPLY_EXPECTED);
    /// absent otherwise.
    public var noReply: Bool?

    public init(
        t: Double, ev: String, client: String? = nil, uuid: String? = nil, hex: String? = nil, type: String? = nil,
        seq: UInt32? = nil, error: String? = nil, message: String? = nil, reason: String? = nil, on: Bool? = nil
    ) {
        self.t = t
        self.ev = ev
        self.client = client
        self.uuid = uuid
        self.hex = hex
        self.type = type
        self.seq = seq
        self.error = error
        self.message = message
        self.reason = reason
        self.on = on
    }

    /// The event names the simulator writes.
    public enum Kind: String, Sendable, CaseIterable {
        case connectRequest = "connect-request"
        case connected
        case connectFailed = "connect-failed"
        case disconnected
        /// A Device1.Disconnect call, logged as it is served (its order
        /// against connect-request is what the daemon's ordering test checks).
        case disconnectRequest = "disconnect-request"
        case write
        case read
        case notify
        case startNotify = "start-notify"
        case stopNotify = "stop-notify"
        /// AcquireNotify served: the CCCD is written, the dongle notifies.
        case acquireNotify = "acquire-notify"
        /// The acquired socket exists; from here notifications reach it.
        case notifySocketReady = "notify-socket-ready"
        /// The acquired socket closed (reason: the link's, stop-notify,
        /// client-closed, bluetoothd-crash…).
        case notifyReleased = "notify-released"
        /// BlueZ 5.66's leftover: the link went during an AcquireNotify's
        /// CCCD write, and the acquisition stays without a socket until
        /// bluetoothd exits (reason: the link's; or a StopNotify on it).
        case acquireStale = "acquire-stale"
        /// A notification the dongle sent that bluetoothd dropped by design
        /// (reason: socket-not-ready, reader-behind, no-socket).
        case notifyDropped = "notify-dropped"
        case sleep
        case wake
        case advertising
        case power
        case crash
        /// bluetoothd's main loop hangs (reason: for how long, in ms): it
        /// keeps its name and answers nothing meanwhile.
        case hang
        /// A graceful bluetoothd restart begins (objects removed, name released).
        case restart
        case restarted
        case discoveryStart = "discovery-start"
        case discoveryStop = "discovery-stop"
        /// The dongle's application hung (reason: att-answers or att-hung).
        case applicationHung = "app-hung"
        case applicationResumed = "app-resumed"
        /// A request the hung peer never answered timed out in BlueZ's ATT layer.
        case attTimeout = "att-timeout"
        /// The dongle's GATT layout changed (reason: service-changed while
        /// connected, or between-connections); `objects-replaced` when
        /// bluetoothd swapped its objects for the new ones.
        case gattChanged = "gatt-changed"
        case gattObjectsReplaced = "gatt-objects-replaced"
        /// The device object became stale (on: true) or was cleared.
        case staleDevice = "stale-device"
        /// The controller left the kernel (reason: its old object path), or
        /// came (reason: its name and address).
        case adapterRemoved = "adapter-removed"
        case adapterAdded = "adapter-added"
        /// The controller's rfkill switch changed (reason: the blocks now,
        /// none, soft, hard or soft+hard; type: control for the knob,
        /// client for a write to the simulated /dev/rfkill).
        case rfkill
        /// The controller locked up (on: true; reason: what ends it) or
        /// answers again (on: false; reason: lockup-off, power-cycle,
        /// adapter-removed).
        case controllerLockup = "controller-lockup"
        /// An agent registered (client: its owner; type: its capability;
        /// on: whether it became the default agent).
        case agentRegistered = "agent-registered"
        /// An agent went (client; reason: unregistered, client-left, or
        /// bluetoothd's exit); or became the default (reason: default).
        case agentUnregistered = "agent-unregistered"
        /// A Device1.Pair call, logged as it is served (client: the caller).
        case pairRequest = "pair-request"
        /// Pairing succeeded (client: the agent's owner, if one answered;
        /// type: just-works or passkey; reason: pair, or security-elevation
        /// for bluetoothd raising a GATT request's security; on: bonded,
        /// i.e. the keys are persistent).
        case paired
        /// Pairing failed (reason: no-agent, wrong-passkey, agent-rejected,
        /// agent-timeout, agent-gone, mitm-required, just-works-repairing,
        /// link-lost, smp-timeout; error and message: what Pair() answers).
        case pairingFailed = "pairing-failed"
        /// The dongle forgot its bond (a factory reset); bluetoothd still
        /// has its key.
        case keysForgotten = "keys-forgotten"
        /// A reconnect found the dongle without the key bluetoothd holds
        /// (LTK Request Negative Reply: Encryption Change 0x06 PIN or Key
        /// Missing); the kernel drops the link for authentication failure.
        case bondRejected = "bond-rejected"
        /// How many other devices advertise on the air now (`reason`: the count).
        case otherAdvertisers = "other-advertisers"
        /// The dongle's DFU bootloader took its place (`on` true) or the
        /// application is back (`on` false).
        case bootloader
        /// The scan stalled (`on` true; reason: until-restart or
        /// until-reset) or delivers again (`on` false; reason: what lifted it:
        /// discovery-restarted, power-cycle, control).
        case scanStall = "scan-stall"
    }

    public var kind: Kind? { Kind(rawValue: ev) }

    /// Parses an event log file. A last line without its newline (the
    /// simulator is mid-write) is skipped; any other bad line throws.
    public static func readLog(path: String) throws -> [SimulatorEvent] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        let decoder = JSONDecoder()
        var events: [SimulatorEvent] = []
        for (index, line) in lines.enumerated() where !line.isEmpty {
            let isUnfinished = index == lines.count - 1
            do {
                events.append(try decoder.decode(SimulatorEvent.self, from: Data(line)))
            } catch where isUnfinished {
                break
            }
        }
        return events
    }

    /// The JSON line (without the newline), `t` and `ev` first so the file
    /// reads well with `tail -f`.
    public var jsonLine: String {
        var fields = ["\"t\":" + Self.milliseconds(t), "\"ev\":" + Self.quoted(ev)]
        func add(_ key: String, _ value: String?) {
            if let value { fields.append("\"\(key)\":" + Self.quoted(value)) }
        }
        add("client", client)
        add("uuid", uuid)
        add("hex", hex)
        add("type", type)
        if let seq { fields.append("\"seq\":\(seq)") }
        add("error", error)
        add("message", message)
        add("reason", reason)
        if let on { fields.append("\"on\":\(on)") }
        if let noReply { fields.append("\"noReply\":\(noReply)") }
        return "{" + fields.joined(separator: ",") + "}"
    }

    private static func milliseconds(_ value: Double) -> String {
        // Three decimals (microseconds) without Foundation's locale-dependent formatting.
        let micro = Int64((value * 1000).rounded())
        let sign = micro < 0 ? "-" : ""
        let magnitude = micro.magnitude
        let fraction = String(magnitude % 1000)
        return sign + String(magnitude / 1000) + "." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }

    private static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
