/// Why the link dropped, as the system says it, never guessed.
///
/// Two sources can say it: the kernel's management socket (its Device
/// Disconnected event, which on BlueZ 5.66 is the only place the reason
/// exists, and which the kernel sends only to sockets bound with
/// CAP_NET_ADMIN), and BlueZ ≥ 5.83's `Device1.Disconnected` signal. Either
/// may arrive before or after bluetoothd's `Connected=false`, so reasons
/// heard are kept for a short while, and a drop noticed first has its
/// reason follow it (`DropAccount`).
///
/// Loop-confined (the link service's loop); time is the service's monotonic clock.
struct DisconnectReasons {
    /// The kernel's reasons (mgmt-api.txt, Device Disconnected), plus
    /// `unavailable` when no source said anything. Raw values are the labels
    /// of the log field, `tether status` and `tether_disconnects_total`.
    enum Reason: String, CaseIterable, Sendable {
        case unspecified
        case connectionTimeout = "connection-timeout"
        case local
        case remote
        case authenticationFailure = "authentication-failure"
        case suspend
        case unavailable

        /// The management event's reason byte.
        init(managementCode code: UInt8) {
            switch code {
            case 1: self = .connectionTimeout
            case 2: self = .local
            case 3: self = .remote
            case 4: self = .authenticationFailure
            case 5: self = .suspend
            default: self = .unspecified
            }
        }

        /// `Device1.Disconnected`'s reason name (BlueZ ≥ 5.83, doc/org.bluez.Device.rst).
        init(bluezReason name: String) {
            switch name {
            case "org.bluez.Reason.Timeout": self = .connectionTimeout
            case "org.bluez.Reason.Local": self = .local
            case "org.bluez.Reason.Remote": self = .remote
            case "org.bluez.Reason.Authentication": self = .authenticationFailure
            case "org.bluez.Reason.Suspend": self = .suspend
            default: self = .unspecified
            }
        }
    }

    /// How long a reason heard stays attached to a drop noticed by other
    /// means (the two arrive on different sockets within milliseconds).
    static let pairing: Duration = .seconds(2)

    private var heard: [(address: String, reason: Reason, at: Duration)] = []

    /// A source reported `reason` for the device with `address` at `at`.
    mutating func heard(_ reason: Reason, address: String, at: Duration) {
        heard.removeAll { at - $0.at > Self.pairing }
        heard.append((address.uppercased(), reason, at))
    }

    /// The reason heard for `address` within `pairing` of `at`, consumed.
    mutating func take(for address: String, near at: Duration) -> Reason? {
        heard.removeAll { at - $0.at > Self.pairing }
        let wanted = address.uppercased()
        guard let index = heard.lastIndex(where: { $0.address == wanted }) else { return nil }
        let reason = heard[index].reason
        heard.removeAll { $0.address == wanted }
        return reason
    }
}
