/// The rfkill switches the kernel has, as `/dev/rfkill` told them: each
/// added switch, its name (`hci0` for a Bluetooth controller) and its blocks.
///
/// Pure: the reader feeds it events and a way to learn a new switch's name
/// (sysfs); tests feed both.
public struct RfkillSwitches: Sendable, Equatable {
    public struct Switch: Sendable, Equatable {
        public var index: UInt32
        public var type: UInt8
        /// `/sys/class/rfkill/rfkill<index>/name`; nil when it could not be read.
        public var name: String?
        public var softBlocked: Bool
        public var hardBlocked: Bool
    }

    public private(set) var switches: [UInt32: Switch] = [:]

    public init() {}

    /// Applies one event; `name` looks up the name of a switch being added.
    /// Returns whether anything changed.
    @discardableResult
    public mutating func apply(_ event: RfkillEvent, name: (UInt32) -> String?) -> Bool {
        let before = switches
        switch event.operation {
        case .add, .change:
            var entry = switches[event.index]
                ?? Switch(index: event.index, type: event.type, name: name(event.index), softBlocked: false, hardBlocked: false)
            entry.softBlocked = event.softBlocked
            entry.hardBlocked = event.hardBlocked
            switches[event.index] = entry
        case .delete:
            switches[event.index] = nil
        case .changeAll:
            // Only written by user space, never read back as such.
            break
        }
        return switches != before
    }

    /// The switch of the Bluetooth controller named like `hci0`.
    public func bluetoothSwitch(named controller: String) -> Switch? {
        switches.values.first { $0.type == RfkillEvent.bluetoothType && $0.name == controller }
    }
}
