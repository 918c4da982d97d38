import Configuration
import DBus
import DurationUnits
import FoundationEssentials
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkSupervisor

/// A daemon's status: what `LinkService` reports, what the control
/// interface `io.tether.Tether1` publishes as properties (this type is their
/// encoding, both ways), what `STATUS=` says and what `tether status` prints.
///
/// On the bus, times follow systemd's conventions: instants are `t`
/// microseconds since the Unix epoch with 0 for "never", and
/// `NextAttemptIn` is `x` microseconds with -1 for "no attempt scheduled".
public struct LinkStatus: Sendable, Equatable {
    public var state: SupervisorState
    public var device: String?
    public var adapter: String?
    public var connectedSince: Date?
    public var lastReadingAt: Date?
    public var readingsWritten: UInt64
    /// Readings received and not yet on disk.
    public var readingsPending: Int
    /// Readings dropped since start because the disk refused writes longer
    /// than the backlog in memory lasted (gap records in the log count them).
    public var readingsDropped: UInt64
    /// Why the readings log refuses writes, while it does: readings then
    /// wait in memory (`readingsPending`).
    public var readingsError: String?
    public var reconnects: Int
    public var windowAttempt: Int
    public var nextAttemptIn: Duration?
    public var lastError: String?
    /// `dongle.silence_limit` in force; nil when off.
    public var silenceLimit: Duration?
    /// Times the silence limit passed while subscribed, since start.
    public var silenceEvents: Int
    /// Why the link last dropped, as the kernel said ("remote",
    /// "connection-timeout", …, or "unavailable"), and when.
    public var lastDisconnectReason: String?
    public var lastDisconnectAt: Date?
    /// What is wrong with the controller beyond bluetoothd's view (one that
    /// failed its initialisation, one that moved to another index), if anything.
    public var adapterProblem: String?
    /// Why bluetoothd cannot be used although it owns its name (it does not
    /// answer: hung), while that lasts.
    public var bluezProblem: String?
    /// The dongle refuses its bond and Tether does not (or no longer) pair
    /// again: what an operator must do.
    public var bondProblem: String?
    /// While the dongle is away (state `away`): when it was last seen (the
    /// link up, or an advertisement), else when Tether found it away.
    public var awaySince: Date?
    /// The dongle this gateway is bound to, when the config finds it by
    /// name or service (`tether rebind` forgets it); nil otherwise.
    public var boundDongle: String?
    /// While the dongle's DFU bootloader advertises (`DfuTarg`, its address
    /// plus one) and the dongle does not: the bootloader's address.
    public var bootloader: String?
    /// What the adapter's controller is: its bus, driver and the device it
    /// hangs on ("UART (hci_uart on ttyAMA0)"); nil until known.
    public var controller: String?

    public init(
        state: SupervisorState, device: String? = nil, adapter: String? = nil, connectedSince: Date? = nil,
        lastReadingAt: Date? = nil, readingsWritten: UInt64 = 0, readingsPending: Int = 0, readingsDropped: UInt64 = 0,
        readingsError: String? = nil, reconnects: Int = 0, windowAttempt: Int = 0,
        nextAttemptIn: Duration? = nil, lastError: String? = nil, silenceLimit: Duration? = nil, silenceEvents: Int = 0,
        lastDisconnectReason: String? = nil, lastDisconnectAt: Date? = nil, adapterProblem: String? = nil,
        bondProblem: String? = nil, bluezProblem: String? = nil, awaySince: Date? = nil, boundDongle: String? = nil,
        bootloader: String? = nil, controller: String? = nil
    ) {
        self.bootloader = bootloader
        self.controller = controller
        self.bondProblem = bondProblem
        self.awaySince = awaySince
        self.boundDongle = boundDongle
        self.bluezProblem = bluezProblem
        self.silenceLimit = silenceLimit
        self.silenceEvents = silenceEvents
        self.lastDisconnectReason = lastDisconnectReason
        self.lastDisconnectAt = lastDisconnectAt
        self.adapterProblem = adapterProblem
        self.state = state
        self.device = device
        self.adapter = adapter
        self.connectedSince = connectedSince
        self.lastReadingAt = lastReadingAt
        self.readingsWritten = readingsWritten
        self.readingsPending = readingsPending
        self.readingsDropped = readingsDropped
        self.readingsError = readingsError
        self.reconnects = reconnects
        self.windowAttempt = windowAttempt
        self.nextAttemptIn = nextAttemptIn
        self.lastError = lastError
    }

    /// One line for systemd's `STATUS=` (shown by `systemctl status`).
    public func summary(now: Date = Date()) -> String {
        var text = state.rawValue
        if let device { text += " \(device)" }
        switch state {
        case .online:
            if let lastReadingAt {
                text += ", last reading \(Self.age(now.timeIntervalSince(lastReadingAt))) ago"
            } else {
                text += ", no reading yet"
            }
        case .waitingForData:
            text += ", connected but no notification yet"
            if let lastReadingAt { text += " (last reading \(Self.age(now.timeIntervalSince(lastReadingAt))) ago)" }
        case .backingOff, .coolingDown:
            if let nextAttemptIn {
                text += ", next attempt in \(DurationText.rounded(nextAttemptIn))"
            }
            if let bondProblem {
                text += ", \(bondProblem)"
            } else if let lastError {
                text += ", last error: \(lastError)"
            }
        case .away:
            if let awaySince {
                text += ", not seen since \(Self.clockTime(awaySince)) (\(Self.age(now.timeIntervalSince(awaySince))) ago)"
            }
        case .connecting where windowAttempt > 0:
            text += ", attempt \(windowAttempt)"
        case .waitingForAdapter:
            if let adapterProblem { text += ": \(adapterProblem)" }
        case .waitingForBluez:
            if let bluezProblem { text += ": \(bluezProblem)" }
        default:
            break
        }
        if let bootloader, state != .online {
            text += "; in its DFU bootloader (DfuTarg at \(bootloader)): a firmware update"
        }
        // Whatever the link does: a reading that is not stored is the
        // operator's first concern (`systemctl status` shows this line).
        if let readingsError {
            text += "; readings NOT STORED (\(readingsPending) waiting in memory): \(readingsError)"
        }
        return text
    }

    /// The local time of day of `date`, HH:MM:SS, as the journal shows it.
    public static func clockTime(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return "?" }
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    /// How long ago (or for how long), as `tether status` and `STATUS=` say
    /// it: "136ms", "3.2s", "3m12s" (`Duration.roundedText`).
    public static func age(_ seconds: TimeInterval) -> String {
        Duration.milliseconds(Int64(max(0, min(seconds, 1e12)) * 1000)).roundedText
    }

    /// Properties that change with the supervisor's state, announced with PropertiesChanged.
    public var signalledProperties: [String: DBusValue] {
        [
            "State": .string(state.rawValue),
            "Device": .string(device ?? ""),
            "Adapter": .string(adapter ?? ""),
            "ConnectedSince": .uint64(Self.microseconds(connectedSince)),
            "Reconnects": .uint32(UInt32(clamping: reconnects)),
            "WindowAttempt": .uint32(UInt32(clamping: windowAttempt)),
            "NextAttemptIn": .int64(nextAttemptIn.map { Self.microseconds($0) } ?? -1),
            "LastError": .string(lastError ?? ""),
            "SilenceLimit": .int64(silenceLimit.map { Self.microseconds($0) } ?? -1),
            "SilenceEvents": .uint32(UInt32(clamping: silenceEvents)),
            "LastDisconnectReason": .string(lastDisconnectReason ?? ""),
            "LastDisconnectAt": .uint64(Self.microseconds(lastDisconnectAt)),
            "AdapterProblem": .string(adapterProblem ?? ""),
            "BluezProblem": .string(bluezProblem ?? ""),
            "BondProblem": .string(bondProblem ?? ""),
            "AwaySince": .uint64(Self.microseconds(awaySince)),
            "BoundDongle": .string(boundDongle ?? ""),
            "Bootloader": .string(bootloader ?? ""),
            "Controller": .string(controller ?? ""),
        ]
    }

    /// Properties that change with every reading: read on demand, never signalled.
    public var liveProperties: [String: DBusValue] {
        [
            "LastReadingAt": .uint64(Self.microseconds(lastReadingAt)),
            "ReadingsWritten": .uint64(readingsWritten),
            "ReadingsPending": .uint32(UInt32(clamping: readingsPending)),
            "ReadingsDropped": .uint64(readingsDropped),
            "ReadingsError": .string(readingsError ?? ""),
        ]
    }

    /// Rebuilds a status from `GetAll`. Missing or mistyped properties are an
    /// error that names them: a daemon of another version must not be misread.
    public init(properties: [String: DBusValue]) throws(DBusError) {
        func value<T>(_ name: String, _ read: (DBusValue) -> T?) throws(DBusError) -> T {
            guard let raw = properties[name], let typed = read(raw) else {
                throw .malformed("the daemon's \(name) property is missing or has the wrong type")
            }
            return typed
        }
        func text(_ name: String) throws(DBusError) -> String? {
            let s = try value(name) { $0.string }
            return s.isEmpty ? nil : s
        }
        func instant(_ name: String) throws(DBusError) -> Date? {
            let us = try value(name) { $0.uint64 }
            return us == 0 ? nil : Date(timeIntervalSince1970: Double(us) / 1e6)
        }
        state = try value("State") { $0.string.flatMap(SupervisorState.init(rawValue:)) }
        device = try text("Device")
        adapter = try text("Adapter")
        connectedSince = try instant("ConnectedSince")
        lastReadingAt = try instant("LastReadingAt")
        readingsWritten = try value("ReadingsWritten") { $0.uint64 }
        readingsPending = try value("ReadingsPending") { $0.int64.flatMap(Int.init(exactly:)) }
        readingsDropped = try value("ReadingsDropped") { $0.uint64 }
        readingsError = try text("ReadingsError")
        reconnects = try value("Reconnects") { $0.int64.flatMap(Int.init(exactly:)) }
        windowAttempt = try value("WindowAttempt") { $0.int64.flatMap(Int.init(exactly:)) }
        let next = try value("NextAttemptIn") { $0.int64 }
        nextAttemptIn = next < 0 ? nil : .microseconds(next)
        lastError = try text("LastError")
        let limit = try value("SilenceLimit") { $0.int64 }
        silenceLimit = limit < 0 ? nil : .microseconds(limit)
        silenceEvents = try value("SilenceEvents") { $0.int64.flatMap(Int.init(exactly:)) }
        lastDisconnectReason = try text("LastDisconnectReason")
        lastDisconnectAt = try instant("LastDisconnectAt")
        adapterProblem = try text("AdapterProblem")
        bluezProblem = try text("BluezProblem")
        bondProblem = try text("BondProblem")
        // Added after the first release: a daemon without it is never away.
        awaySince = properties["AwaySince"] == nil ? nil : try instant("AwaySince")
        boundDongle = properties["BoundDongle"] == nil ? nil : try text("BoundDongle")
        bootloader = properties["Bootloader"] == nil ? nil : try text("Bootloader")
        controller = properties["Controller"] == nil ? nil : try text("Controller")
    }

    static func microseconds(_ date: Date?) -> UInt64 {
        guard let date else { return 0 }
        let us = date.timeIntervalSince1970 * 1e6
        return us.isFinite && us > 0 ? UInt64(us) : 0
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        max(0, duration.wholeMicroseconds)
    }
}
