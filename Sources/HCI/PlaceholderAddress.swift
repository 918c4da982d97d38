/// Addresses a controller has before it is given its own: the defaults
/// Broadcom and Cypress chips come up with when no address was loaded
/// (the kernel's btbcm keeps a list of them, and marks such a controller
/// unconfigured when its driver can set an address), and all zeros, read
/// before the controller's initialisation got that far.
///
/// The Raspberry Pi's onboard radio comes up on one in about one boot in
/// ten until `bthelper` sets the real address (raspberrypi/linux #6462,
/// RPi-Distro/pi-bluetooth #29). BlueZ keeps pairings under the adapter's
/// address (`/var/lib/bluetooth/ADDRESS/`), so an adapter on a placeholder
/// has none of them: Tether waits for the real address rather than use it.
public enum PlaceholderAddress {
    /// Address (upper-case) → the chip whose default it is.
    public static let known: [String: String] = [
        "00:00:00:00:00:00": "no address read yet",
        "AA:AA:AA:AA:AA:AA": "BCM43430A1's default",
        "43:45:C0:00:1F:AC": "BCM4345C0's default",
        "43:45:C5:00:1F:AC": "BCM4345C5's default",
        "43:43:A0:12:1F:AC": "BCM43430A0's default",
        "43:34:1B:00:1F:AC": "BCM43341B's default",
        "43:34:B0:00:00:00": "BCM4334B0's default",
        "43:30:B1:00:00:00": "BCM4330B1's default",
        "43:24:B3:00:00:00": "BCM4324B3's default",
        "43:84:B0:00:76:93": "BCM4384B0's default",
        "00:20:70:02:A0:00": "BCM20702A0's default",
        "20:70:02:A0:00:00": "BCM20702A1's default",
        "20:76:A0:00:56:79": "BCM2076B1's default",
    ]

    /// What `address` is a placeholder of ("BCM43430A1's default"); nil for
    /// an address of the controller's own.
    public static func kind(of address: String) -> String? {
        known[address.uppercased()]
    }
}
