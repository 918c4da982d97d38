import DBus
import Foundation

/// A daemon's status as the control interface publishes it: the properties
/// of `io.tether.Tether1`, and what `tether status` prints.
///
/// On the bus, times follow systemd's conventions: instants are `t`
/// microseconds since the Unix epoch with 0 for "never", and
/// `NextAttemptIn` is `x` microseconds with -1 for "no attempt scheduled".
public struct ControlStatus: Sendable, Equatable {
    public var state: String
    public var device: String?
    public var adapter: String?
    public var connectedSince: Date?
    public var lastReadingAt: Date?
    public var readingsWritten: UInt64
    public var reconnects: UInt32
    public var windowAttempt: UInt32
    public var nextAttemptIn: Duration?
    public var lastError: String?

    public init(
        state: String, device: String? = nil, adapter: String? = nil, connectedSince: Date? = nil,
        lastReadingAt: Date? = nil, readingsWritten: UInt64 = 0, reconnects: UInt32 = 0, windowAttempt: UInt32 = 0,
        nextAttemptIn: Duration? = nil, lastError: String? = nil
    ) {
        self.state = state
        self.device = device
        self.adapter = adapter
        self.connectedSince = connectedSince
        self.lastReadingAt = lastReadingAt
        self.readingsWritten = readingsWritten
        self.reconnects = reconnects
        self.windowAttempt = windowAttempt
        self.nextAttemptIn = nextAttemptIn
        self.lastError = lastError
    }

    /// Properties that change with the supervisor's state, announced with PropertiesChanged.
    public var signalledProperties: [String: DBusValue] {
        [
            "State": .string(state),
            "Device": .string(device ?? ""),
            "Adapter": .string(adapter ?? ""),
            "ConnectedSince": .uint64(Self.microseconds(connectedSince)),
            "Reconnects": .uint32(reconnects),
            "WindowAttempt": .uint32(windowAttempt),
            "NextAttemptIn": .int64(nextAttemptIn.map { Self.microseconds($0) } ?? -1),
            "LastError": .string(lastError ?? ""),
        ]
    }

    /// Properties that change with every reading: read on demand, never signalled.
    public var liveProperties: [String: DBusValue] {
        [
            "LastReadingAt": .uint64(Self.microseconds(lastReadingAt)),
            "ReadingsWritten": .uint64(readingsWritten),
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
        state = try value("State") { $0.string }
        device = try text("Device")
        adapter = try text("Adapter")
        connectedSince = try instant("ConnectedSince")
        lastReadingAt = try instant("LastReadingAt")
        readingsWritten = try value("ReadingsWritten") { $0.uint64 }
        reconnects = try value("Reconnects") { $0.int64.flatMap(UInt32.init(exactly:)) }
        windowAttempt = try value("WindowAttempt") { $0.int64.flatMap(UInt32.init(exactly:)) }
        let next = try value("NextAttemptIn") { $0.int64 }
        nextAttemptIn = next < 0 ? nil : .microseconds(next)
        lastError = try text("LastError")
    }

    static func microseconds(_ date: Date?) -> UInt64 {
        guard let date else { return 0 }
        let us = date.timeIntervalSince1970 * 1e6
        return us.isFinite && us > 0 ? UInt64(us) : 0
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }
}
