/// `reconnect.remove_stale_device`: which device objects Tether may remove
/// (Adapter1.RemoveDevice) when a retry window failed with errors pointing at
/// a stale object. Raw values are the config's spellings.
public enum StaleDeviceRemoval: String, Sendable, Equatable, CaseIterable {
    /// Never remove it.
    case never
    /// Only a device without a bond: removing a bonded one throws its keys
    /// away. Unless Tether pairs (`dongle.pairing`): it pairs again after.
    case unbonded
    /// Also a bonded one (its keys are lost; it must pair again).
    case always
}
