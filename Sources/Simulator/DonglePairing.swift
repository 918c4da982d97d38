/// What the dongle's firmware asks of a central before its GATT works
/// (`SimulatorOptions.pairing`), and so how pairing with it goes.
///
/// With `.justWorks` or `.passkey`, every characteristic access that is an
/// ATT request (ReadValue, WriteValue type "request"/"reliable", the CCCD
/// write of StartNotify and AcquireNotify) needs an encrypted link: on a link
/// without one the dongle answers Insufficient Encryption and bluetoothd
/// raises security by itself (pairing as the kernel's initiator, asking the
/// default agent). A write without response on such a link is dropped by
/// the dongle without a word.
public enum DonglePairing: Sendable, Equatable, CustomStringConvertible {
    /// No security needed (the dongle still accepts a Just Works pairing).
    case none
    /// Encryption needed; the dongle has no input or output (NoInputNoOutput),
    /// so pairing is Just Works.
    case justWorks
    /// Encryption with MITM protection needed: the dongle displays this
    /// passkey (0…999999, DisplayOnly) and the central must type it
    /// (`Agent1.RequestPasskey`). A pairing that falls back to Just Works
    /// (the central's agent cannot type) is refused by the dongle.
    case passkey(UInt32)

    /// Whether GATT requests need an encrypted link.
    public var requiresEncryption: Bool { self != .none }

    /// The largest passkey SMP carries (six decimal digits).
    public static let maximumPasskey: UInt32 = 999_999

    /// Parses the command line's form: `none`, `just-works` or
    /// `passkey=NNNNNN` (up to six digits, 0…999999).
    public init(parsing text: String) throws(DonglePairingError) {
        switch text {
        case "none":
            self = .none
        case "just-works":
            self = .justWorks
        case _ where text.hasPrefix("passkey="):
            let digits = text.dropFirst("passkey=".count)
            guard !digits.isEmpty, digits.count <= 6, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let value = UInt32(digits)
            else {
                throw DonglePairingError(text: text)
            }
            self = .passkey(value)
        default:
            throw DonglePairingError(text: text)
        }
    }

    /// The command line's form (`passkey=` with six digits).
    public var description: String {
        switch self {
        case .none: "none"
        case .justWorks: "just-works"
        case .passkey(let value):
            "passkey=" + String(repeating: "0", count: max(0, 6 - String(value).count)) + String(value)
        }
    }
}

/// A `--pairing` value that is none of `none`, `just-works`, `passkey=NNNNNN`.
public struct DonglePairingError: Error, Sendable, Equatable, CustomStringConvertible {
    public let text: String

    public init(text: String) {
        self.text = text
    }

    public var description: String {
        "pairing must be none, just-works or passkey=NNNNNN (six digits, 000000…999999), not \"\(text)\""
    }
}

/// An agent's IO capability (`RegisterAgent`'s second argument), as
/// bluetoothd's `parse_io_capability` reads it: "" means KeyboardDisplay.
enum AgentCapability: String, Sendable {
    case displayOnly = "DisplayOnly"
    case displayYesNo = "DisplayYesNo"
    case keyboardOnly = "KeyboardOnly"
    case noInputNoOutput = "NoInputNoOutput"
    case keyboardDisplay = "KeyboardDisplay"

    init?(parsing text: String) {
        if text.isEmpty {
            self = .keyboardDisplay
        } else {
            self.init(rawValue: text)
        }
    }

    /// Against a DisplayOnly peer, SMP's method table gives passkey entry
    /// (the central types) only to these; the others fall back to Just Works.
    var typesPasskey: Bool { self == .keyboardOnly || self == .keyboardDisplay }
}
