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

    // MARK: Agents and pairing (src/error.c, src/device.c's bonding errors)

    /// RegisterAgent from a client that has one; Pair on a bonded device.
    static let alreadyExists = DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists")
    /// Every SMP failure: a wrong passkey, an agent's refusal, no agent, the
    /// dongle refusing a pairing without MITM protection.
    static let authenticationFailed = DBusError.remote(
        name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed"
    )
    /// The link dropped during pairing, or CancelPairing.
    static let authenticationCanceled = DBusError.remote(
        name: "org.bluez.Error.AuthenticationCanceled", message: "Authentication Canceled"
    )
    /// SMP's own timeout (30 s) ran out: the peer never answered.
    static let authenticationTimeout = DBusError.remote(
        name: "org.bluez.Error.AuthenticationTimeout", message: "Authentication Timeout"
    )
    /// Pair on an unconnected device whose connection failed (MGMT status
    /// CONNECT_FAILED).
    static let connectionAttemptFailed = DBusError.remote(
        name: "org.bluez.Error.ConnectionAttemptFailed", message: "Page Timeout"
    )
    /// An ATT request the dongle refused for want of encryption, when
    /// bluetoothd could not raise the link's security (create_gatt_dbus_error).
    static let notPaired = notPermitted("Not paired")
    /// 5.66's answer to a Connect whose link the kernel dropped for an
    /// authentication failure (the peer lost its keys), as `make e2e` saw it:
    /// att_connect_cb's socket error (EACCES) mapped to an abort, about 60 ms
    /// after the kernel's reason 4. (Its sources also allow
    /// "br-connection-canceled", from device_remove_connection, which the
    /// real stack never gave.)
    static let keyRefused = failed(BlueZ.FailedMessage.abortByLocal)

    /// 5.66's answer to a Connect while the kernel still holds a connection
    /// to the device that bluetoothd has let go of (a locked-up controller
    /// never reported its end): bt_io_connect fails with EBUSY and
    /// device_connect_le answers at once with EIO's text, as `make e2e`'s
    /// uart-lockup saw it (within 20 ms, every attempt).
    static let kernelLinkBusy = failed("Input/output error")

    /// What GATT calls get on a device without a link.
    static let gattNotConnected = failed(BlueZ.FailedMessage.notConnected)
    /// What a Connect gets when the dongle does not answer (asleep, or a
    /// pending connect cancelled by Disconnect).
    static let abortByLocal = failed(BlueZ.FailedMessage.abortByLocal)
}
