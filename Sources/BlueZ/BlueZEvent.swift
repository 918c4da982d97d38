import DBus

/// What the client reports about bluetoothd, in the order it happened.
public enum BlueZEvent: Sendable {
    /// bluetoothd is on the bus (at start, or back after a restart); the tree
    /// is a fresh `GetManagedObjects` snapshot. Sessions from before are gone.
    case serviceAppeared(owner: String, tree: ObjectTree)
    /// bluetoothd owns its name but gave no object tree in five quick tries
    /// (it does not answer, or refuses this client); the tree is asked for
    /// again at a growing pace and comes as `serviceAppeared`. Said once per owner.
    case serviceUnanswered(owner: String, error: BlueZError)
    /// bluetoothd left the bus. Every object and session is gone, whether or
    /// not InterfacesRemoved was sent.
    case serviceVanished
    case interfacesAdded(ObjectPath, DBusValue)
    case interfacesRemoved(ObjectPath, [String])
    case propertiesChanged(ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String])
    /// A characteristic's `Value` changed, alone: a notification, or the echo
    /// of a read. A `Value` that shares its PropertiesChanged with other
    /// properties (bluetoothd flushes pending ones with it) comes as
    /// `propertiesChanged`, and is a notification too.
    case valueChanged(ObjectPath, [UInt8])
    /// BlueZ ≥ 5.83's `Device1.Disconnected(s reason, s message)`, sent
    /// before `Connected` turns false: why the link went (`org.bluez.Reason.Timeout`,
    /// `…Local`, `…Remote`, …). Older versions (Debian 12's 5.66) have none.
    case deviceDisconnected(ObjectPath, reason: String, message: String)
    /// The consumer fell behind and this many signals were dropped (readings
    /// among them); a fresh `serviceAppeared` snapshot follows.
    case signalsLost(Int)
}

extension ObjectTree {
    /// Applies one event; returns false for events that carry no tree change.
    @discardableResult
    public mutating func apply(_ event: BlueZEvent) -> Bool {
        switch event {
        case .serviceAppeared(_, let tree):
            self = tree
        case .serviceVanished:
            self = ObjectTree()
        case .interfacesAdded(let path, let interfaces):
            do { try addInterfaces(path, interfaces) } catch { return false }
        case .interfacesRemoved(let path, let names):
            removeInterfaces(path, names)
        case .propertiesChanged(let path, let interface, let changed, let invalidated):
            changeProperties(path, interface: interface, changed: changed, invalidated: invalidated)
        case .valueChanged, .signalsLost, .deviceDisconnected, .serviceUnanswered:
            return false
        }
        return true
    }
}
