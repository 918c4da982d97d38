import DBus

/// Names from BlueZ's D-Bus API (doc/org.bluez.*.rst), shared by the client
/// and the simulator so the two cannot drift apart.
public enum BlueZ {
    public static let service = "org.bluez"
    public static let adapterInterface = "org.bluez.Adapter1"
    public static let deviceInterface = "org.bluez.Device1"
    public static let gattServiceInterface = "org.bluez.GattService1"
    public static let gattCharacteristicInterface = "org.bluez.GattCharacteristic1"
    public static let gattDescriptorInterface = "org.bluez.GattDescriptor1"
    public static let agentManagerInterface = "org.bluez.AgentManager1"
    public static let agentInterface = "org.bluez.Agent1"
    /// Where bluetoothd serves AgentManager1.
    public static let managerPath: ObjectPath = "/org/bluez"

    /// Error names (src/error.c).
    public enum ErrorName {
        public static let failed = "org.bluez.Error.Failed"
        public static let inProgress = "org.bluez.Error.InProgress"
        public static let notReady = "org.bluez.Error.NotReady"
        public static let notConnected = "org.bluez.Error.NotConnected"
        public static let alreadyConnected = "org.bluez.Error.AlreadyConnected"
        public static let notPermitted = "org.bluez.Error.NotPermitted"
        public static let notAuthorized = "org.bluez.Error.NotAuthorized"
        public static let notSupported = "org.bluez.Error.NotSupported"
        public static let invalidArguments = "org.bluez.Error.InvalidArguments"
        public static let invalidOffset = "org.bluez.Error.InvalidOffset"
        public static let invalidValueLength = "org.bluez.Error.InvalidValueLength"
        public static let doesNotExist = "org.bluez.Error.DoesNotExist"
        public static let alreadyExists = "org.bluez.Error.AlreadyExists"
        /// Pairing failed: every SMP failure, a wrong passkey, an agent's refusal.
        public static let authenticationFailed = "org.bluez.Error.AuthenticationFailed"
        public static let authenticationRejected = "org.bluez.Error.AuthenticationRejected"
        /// The link dropped during pairing, or CancelPairing.
        public static let authenticationCanceled = "org.bluez.Error.AuthenticationCanceled"
        public static let authenticationTimeout = "org.bluez.Error.AuthenticationTimeout"
        /// An agent's refusal (Agent1 replies).
        public static let rejected = "org.bluez.Error.Rejected"
    }

    /// Messages that come with `org.bluez.Error.Failed` on Connect (src/device.c,
    /// mgmt status strings) and on GATT operations.
    public enum FailedMessage {
        public static let abortByLocal = "le-connection-abort-by-local"
        public static let connectionTimeout = "le-connection-timeout"
        public static let abortByRemote = "le-connection-abort-by-remote"
        public static let busy = "le-connection-busy"
        public static let refused = "le-connection-refused"
        public static let concurrentLimit = "le-connection-concurrent-connection-limit"
        public static let gattBrowsing = "le-connection-gatt-browsing"
        public static let keyMissing = "le-connection-key-missing"
        public static let unknown = "le-connection-unknown"
        public static let notConnected = "Not connected"
        public static let inProgressText = "Operation already in progress"
    }
}
