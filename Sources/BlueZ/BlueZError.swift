import DBus

/// An error from bluetoothd (or from reaching it), with what a caller should do about it.
public struct BlueZError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the error means for a retrying caller.
    public enum Disposition: String, Sendable {
        /// Try again later (RF trouble, a dropped link, a timeout, bluetoothd away).
        case transient
        /// A stale operation is still pending in bluetoothd: cancel it
        /// (Device1.Disconnect cancels a pending connect), then try again.
        case needsCancel
        /// Retrying the same call will not help (permissions, wrong
        /// characteristic, bad arguments); it needs a person or a new config.
        case fatal
    }

    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public init(_ error: DBusError) {
        // libdbus's own texts (UnknownObject's "Method … doesn't exist") end
        // in a newline, which would end up inside log lines and status.
        var message = Substring(error.message)
        while let last = message.last, last.isWhitespace { message = message.dropLast() }
        self.init(name: error.name, message: String(message))
    }

    public static func malformed(_ what: String) -> BlueZError {
        BlueZError(name: "org.freedesktop.DBus.Error.InvalidSignature", message: what)
    }

    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    public var disposition: Disposition { BlueZError.classify(name: name, message: message) }

    /// The adapter is off or gone (`NotReady`): wait for Powered, do not retry.
    public var isAdapterNotReady: Bool { name == BlueZ.ErrorName.notReady }

    /// No reply came within the call's timeout: bluetoothd is slow, or hung.
    public var isNoReply: Bool { name == DBusErrorName.noReply }

    /// The object is gone (device removed, bluetoothd restarted).
    public var isUnknownObject: Bool {
        name == DBusErrorName.unknownObject || name == DBusErrorName.unknownMethod
    }

    /// The error points at a stale device object in bluetoothd rather than at
    /// the air: the object is gone (`UnknownObject`, `DoesNotExist`), or the
    /// kernel aborted the connection locally (`le-connection-abort-by-local`,
    /// seen with a device object whose address type or cached state no
    /// longer matches the dongle; also RF trouble, so it only counts when a
    /// whole retry window fails with it).
    public var pointsAtStaleDevice: Bool {
        isUnknownObject || name == BlueZ.ErrorName.doesNotExist
            || (name == BlueZ.ErrorName.failed && message == BlueZ.FailedMessage.abortByLocal)
    }

    /// Nobody answered a connect: the kernel gave up on a peer that never
    /// answered (`le-connection-abort-by-local` once its LE connection
    /// timeout passed, `le-connection-timeout`). What a dongle that is away
    /// gives; also a stale object or a wedged controller, which only other
    /// evidence tells apart.
    public var peerDidNotAnswer: Bool {
        name == BlueZ.ErrorName.failed
            && (message == BlueZ.FailedMessage.abortByLocal || message == BlueZ.FailedMessage.connectionTimeout)
    }

    /// Classifies by name and, for `org.bluez.Error.Failed`, by message.
    public static func classify(name: String, message: String) -> Disposition {
        switch name {
        case BlueZ.ErrorName.inProgress:
            // "Operation already in progress": a connect is stuck in bluetoothd.
            return .needsCancel
        case BlueZ.ErrorName.failed where message == "Operation already in progress":
            // The same stuck connect, as bluetoothd 5.66 reports it when the
            // kernel still holds a pending LE connection (strerror(EALREADY)
            // under Failed): seen in the e2e tests right after an HCI reset.
            return .needsCancel
        case BlueZ.ErrorName.failed:
            // le-connection-* (abort-by-local, timeout, busy, …), "Not connected",
            // ATT errors: all conditions of the link or the air.
            return .transient
        case BlueZ.ErrorName.notReady, BlueZ.ErrorName.notConnected, BlueZ.ErrorName.alreadyConnected,
            DBusErrorName.unknownObject, DBusErrorName.unknownMethod, DBusErrorName.noReply,
            DBusErrorName.serviceUnknown, DBusErrorName.nameHasNoOwner, DBusErrorName.disconnected,
            DBusErrorName.noMemory:
            return .transient
        case BlueZ.ErrorName.authenticationFailed, BlueZ.ErrorName.authenticationRejected:
            // A pairing the dongle refuses (a wrong passkey, a method it
            // will not accept) is refused the same way next time.
            return .fatal
        case BlueZ.ErrorName.notPermitted, BlueZ.ErrorName.notAuthorized, BlueZ.ErrorName.notSupported,
            BlueZ.ErrorName.invalidArguments, BlueZ.ErrorName.invalidOffset, BlueZ.ErrorName.invalidValueLength,
            DBusErrorName.accessDenied, DBusErrorName.invalidArgs, DBusErrorName.unknownInterface,
            DBusErrorName.unknownProperty, DBusErrorName.invalidSignature:
            return .fatal
        default:
            // Something new: never give up on it.
            return .transient
        }
    }
}
