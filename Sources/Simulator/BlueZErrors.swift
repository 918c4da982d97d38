import BlueZ
import DBus

/// The error replies bluetoothd sends, with the texts of BlueZ's src/error.c,
/// so clients see exactly what they would see from the real daemon.
enum BlueZFault {
    static func failed(_ message: String) -> DBusError {
        .remote(name: BlueZ.ErrorName.failed, message: message)
    }

    /// btd_error_busy: StartDiscovery twice from one client.
    static let busy = DBusError.remote(name: BlueZ.ErrorName.inProgress, message: "Operation already in progress")
    /// A Connect while another is pending.
    static let connectInProgress = DBusError.remote(
        name: BlueZ.ErrorName.inProgress, message: BlueZ.FailedMessage.inProgressText
    )
    /// btd_error_in_progress: AcquireNotify while a notify session exists.
    static let inProgress = DBusError.remote(name: BlueZ.ErrorName.inProgress, message: "In Progress")
    static let notReady = DBusError.remote(name: BlueZ.ErrorName.notReady, message: "Resource Not Ready")
    static let notConnected = DBusError.remote(name: BlueZ.ErrorName.notConnected, message: "Not Connected")
    static let notSupported = DBusError.remote(name: BlueZ.ErrorName.notSupported, message: "Operation is not supported")
    static let doesNotExist = DBusError.remote(name: BlueZ.ErrorName.doesNotExist, message: "Does Not Exist")
    static let invalidOffset = DBusError.remote(name: BlueZ.ErrorName.invalidOffset, message: "Invalid offset")

    static func invalidArguments(_ message: String = "Invalid arguments in method call") -> DBusError {
        .remote(name: BlueZ.ErrorName.invalidArguments, message: message)
    }

    static func notPermitted(_ message: String) -> DBusError {
        .remote(name: BlueZ.ErrorName.notPermitted, message: message)
    }

    /// What GATT calls get on a device without a link.
    static let gattNotConnected = failed(BlueZ.FailedMessage.notConnected)
    /// What a Connect gets when the dongle does not answer (asleep, or a
    /// pending connect cancelled by Disconnect).
    static let abortByLocal = failed(BlueZ.FailedMessage.abortByLocal)
}
