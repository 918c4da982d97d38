import BlueZ
import Configuration
import DBus
import Testing
@testable import TetherDaemon

/// What the daemon tells when its controller changes index or identity.
@Suite struct AdapterWatchTests {
    static func adapter(_ name: String, _ address: String) -> Adapter {
        Adapter(path: ObjectPath(stringLiteral: "/org/bluez/" + name), ["Address": .string(address), "Powered": .boolean(true)])
    }

    @Test func aControllerFollowedByAddressIsToldOnceWhenItMoves() {
        var watch = AdapterWatch(config: .init(adapterAddress: "00:1A:7D:DA:71:13"))
        let hci0 = Self.adapter("hci0", "00:1A:7D:DA:71:13")
        let hci1 = Self.adapter("hci1", "00:1A:7D:DA:71:13")
        #expect(watch.update(resolved: hci0, adapters: [hci0]).isEmpty)
        // Unplugged: another controller takes hci0; ours is not resolved.
        let other = Self.adapter("hci0", "11:22:33:44:55:66")
        #expect(watch.update(resolved: nil, adapters: [other]).isEmpty)
        let notes = watch.update(resolved: hci1, adapters: [other, hci1])
        #expect(notes == [.moved(address: "00:1A:7D:DA:71:13", from: "hci0", to: "hci1")])
        #expect(notes.first?.description == "hci0 (00:1A:7D:DA:71:13) is now hci1")
        #expect(watch.update(resolved: hci1, adapters: [other, hci1]).isEmpty)
    }

    @Test func aConfiguredIndexThatDisappearsOrHoldsAnotherControllerIsTold() {
        var watch = AdapterWatch(config: .init(adapter: "hci0"))
        let ours = Self.adapter("hci0", "00:1A:7D:DA:71:13")
        _ = watch.update(resolved: ours, adapters: [ours])
        #expect(watch.update(resolved: nil, adapters: []) == [.gone(name: "hci0", address: "00:1A:7D:DA:71:13")])
        #expect(watch.update(resolved: nil, adapters: []).isEmpty)
        let moved = Self.adapter("hci1", "00:1A:7D:DA:71:13")
        let notes = watch.update(resolved: nil, adapters: [moved])
        #expect(notes == [.movedAwayFromConfiguredName(name: "hci0", address: "00:1A:7D:DA:71:13", now: "hci1")])
        #expect(notes.first?.description.contains("set adapter = \"00:1A:7D:DA:71:13\"") == true)
        #expect(watch.update(resolved: nil, adapters: [moved]).isEmpty)
        let stranger = Self.adapter("hci0", "11:22:33:44:55:66")
        #expect(watch.update(resolved: stranger, adapters: [stranger, moved])
            == [.replaced(name: "hci0", was: "00:1A:7D:DA:71:13", now: "11:22:33:44:55:66")])
    }
}
