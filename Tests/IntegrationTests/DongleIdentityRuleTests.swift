import BlueZ
import DBus
import Foundation
import Testing

@testable import TetherDaemon

/// `DongleIdentity`'s rules, without a bus.
struct DongleIdentityRuleTests {
    static func device(_ address: String, name: String? = nil, type: String = "random", uuids: [String] = []) -> Device {
        var properties: [String: DBusValue] = ["Address": .string(address), "AddressType": .string(type), "UUIDs": .strings(uuids)]
        if let name { properties["Name"] = .string(name) }
        let path = ObjectPath("/org/bluez/hci0/dev_" + address.replacingOccurrences(of: ":", with: "_")) ?? "/org/bluez/hci0/dev_invalid"
        return Device(path: path, properties)
    }

    @Test func theBootloaderIsAtTheLastOctetPlusOneWrapping() {
        #expect(DongleIdentity.bootloaderAddress(of: "AA:BB:CC:DD:EE:FF") == "AA:BB:CC:DD:EE:00")
        #expect(DongleIdentity.bootloaderAddress(of: "c4:00:00:00:12:0f") == "C4:00:00:00:12:10")
        #expect(DongleIdentity.bootloaderAddress(of: "not an address") == nil)
    }

    @Test func onlyDfuTargAtThatAddressIsTheBootloader() {
        let dongle = "AA:BB:CC:DD:EE:10"
        #expect(DongleIdentity.isBootloader(Self.device("AA:BB:CC:DD:EE:11", name: "DfuTarg"), of: dongle))
        #expect(DongleIdentity.isBootloader(Self.device("AA:BB:CC:DD:EE:11", uuids: [DongleIdentity.dfuService]), of: dongle))
        // DfuTarg of another vehicle's dongle, and the right address with another name.
        #expect(!DongleIdentity.isBootloader(Self.device("AA:BB:CC:DD:EE:21", name: "DfuTarg"), of: dongle))
        #expect(!DongleIdentity.isBootloader(Self.device("AA:BB:CC:DD:EE:11", name: "Tether-Dongle"), of: dongle))
        #expect(!DongleIdentity.isBootloader(Self.device("AA:BB:CC:DD:EE:11", name: "DfuTarg"), of: nil))
    }

    @Test func aBootloaderEpisodeIsSaidOnceAndEndsWhenTheDongleIsSeen() {
        var identity = DongleIdentity()
        let bootloader = Self.device("AA:BB:CC:DD:EE:11", name: "DfuTarg")
        #expect(identity.dongleSeen("AA:BB:CC:DD:EE:10") == nil)
        #expect(identity.bootloaderSeen(bootloader, of: "AA:BB:CC:DD:EE:10")?.contains("DFU bootloader") == true)
        #expect(identity.bootloaderSeen(bootloader, of: "AA:BB:CC:DD:EE:10") == nil)
        #expect(identity.bootloader == "AA:BB:CC:DD:EE:11")
        #expect(identity.dongleSeen("AA:BB:CC:DD:EE:10")?.contains("is back") == true)
        #expect(identity.bootloader == nil)
    }

    @Test func anAddressChangeOfTheBoundObjectMovesTheBinding() {
        var identity = DongleIdentity()
        let rpa = Self.device("5A:11:22:33:44:55")
        let move = identity.addressChanged(of: rpa, to: "c4:00:00:00:12:34", newType: "public", knownAs: rpa.address, configured: nil, bound: rpa.address)
        guard case .rebind(let to, _) = move else {
            Issue.record("\(String(describing: move))")
            return
        }
        #expect(to == "C4:00:00:00:12:34")
        #expect(identity.followed == nil)
    }

    @Test func aConfiguredAddressIsFollowedInMemoryWithAWarning() {
        var identity = DongleIdentity()
        let rpa = Self.device("5A:11:22:33:44:55")
        let move = identity.addressChanged(of: rpa, to: "C4:00:00:00:12:34", newType: "public", knownAs: rpa.address, configured: rpa.address, bound: nil)
        guard case .followConfigured(let warning) = move else {
            Issue.record("\(String(describing: move))")
            return
        }
        #expect(warning.contains("set dongle.address = \"C4:00:00:00:12:34\""))
        #expect(identity.followed == "C4:00:00:00:12:34")
    }

    @Test func aChangeOfAnotherObjectOrToTheSameAddressIsNothing() {
        var identity = DongleIdentity()
        let stranger = Self.device("11:22:33:44:55:66")
        #expect(identity.addressChanged(of: stranger, to: "C4:00:00:00:12:34", newType: nil, knownAs: "AA:BB:CC:DD:EE:FF", configured: nil, bound: "AA:BB:CC:DD:EE:FF") == nil)
        let dongle = Self.device("AA:BB:CC:DD:EE:FF")
        #expect(identity.addressChanged(of: dongle, to: "aa:bb:cc:dd:ee:ff", newType: nil, knownAs: dongle.address, configured: nil, bound: dongle.address) == nil)
        // Found by name with nothing bound: no address to follow.
        #expect(identity.addressChanged(of: dongle, to: "C4:00:00:00:12:34", newType: nil, knownAs: nil, configured: nil, bound: nil) == nil)
    }

    @Test func resolvablePrivateAddressesAreTheRandomOnesWithTopBits01() {
        #expect(DongleIdentity.isResolvablePrivate(Self.device("5A:11:22:33:44:55")))
        #expect(!DongleIdentity.isResolvablePrivate(Self.device("C4:11:22:33:44:55")))  // static random
        #expect(!DongleIdentity.isResolvablePrivate(Self.device("5A:11:22:33:44:55", type: "public")))
    }
}
