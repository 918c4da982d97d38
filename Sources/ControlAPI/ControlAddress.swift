import Configuration
import DBus

/// Where one daemon instance serves its control interface on the system bus.
///
/// The default instance owns `io.tether.Tether` and serves `/io/tether/Tether`;
/// instance `NAME` owns `io.tether.Tether.NAME` and serves
/// `/io/tether/Tether/NAME`. Every name shares the prefix that the D-Bus
/// policy file grants (`own_prefix`, `send_destination_prefix`), so one
/// policy covers any number of instances.
public struct ControlAddress: Sendable, Equatable {
    public static let interface = "io.tether.Tether1"
    public static let baseName = "io.tether.Tether"
    public static let basePath: ObjectPath = "/io/tether/Tether"

    public let instance: InstanceName
    public let busName: String
    public let path: ObjectPath

    public init(instance: InstanceName) {
        self.instance = instance
        guard let name = instance.name else {
            busName = Self.baseName
            path = Self.basePath
            return
        }
        let element = Self.escape(name)
        busName = "\(Self.baseName).\(element)"
        // Escaping leaves only [A-Za-z0-9_], which every path element accepts.
        path = Self.basePath.appending(element) ?? Self.basePath
    }

    /// The systemd unit that runs this instance: `tether.service`, or
    /// `tether@NAME.service`.
    public var unitName: String {
        instance.name.map { "tether@\($0).service" } ?? "tether.service"
    }

    /// Bus name and path elements allow `[A-Za-z0-9_]` and may not start with
    /// a digit; instance names also have `-` and may. Escaping as `_XX` (hex),
    /// `_` included, keeps distinct instances distinct, as systemd's own
    /// bus-label escaping does.
    static func escape(_ name: String) -> String {
        var out = ""
        for (index, byte) in name.utf8.enumerated() {
            let isLetter = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            let isDigit = byte >= 0x30 && byte <= 0x39
            if isLetter || (isDigit && index > 0) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "_" + String(byte, radix: 16, uppercase: false).leftPadded(to: 2)
            }
        }
        return out
    }
}

/// Error names the control interface replies with.
public enum ControlErrorName {
    /// Reconnect while bluetoothd or the adapter is missing: nothing to connect with.
    public static let notReady = "io.tether.Tether1.Error.NotReady"
    /// Reconnect asked for more often than `ReconnectRateLimit` allows.
    public static let rateLimited = "io.tether.Tether1.Error.RateLimited"
    /// Rebind on a daemon whose config names the dongle's address.
    public static let notBound = "io.tether.Tether1.Error.NotBound"
    /// Rebind could not forget the binding (its file).
    public static let failed = "io.tether.Tether1.Error.Failed"
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
