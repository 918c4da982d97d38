import BlueZ
import Configuration
import DBus
import HCI
import Testing
@testable import TetherDaemon

/// A controller that came up before it was given its address (the
/// Raspberry Pi's onboard radio, now and then) is not used until it has it,
/// however the config names the adapter; Tether says what it waits for.
@Suite struct PlaceholderAddressTests {
    static let dongle = "F1:E2:D3:C4:B5:A6"
    static let real = "B8:27:EB:12:34:56"

    static func tree(_ adapters: [(String, String)]) throws -> ObjectTree {
        var tree = ObjectTree()
        for (name, address) in adapters {
            let path = try #require(ObjectPath("/org/bluez/\(name)"))
            let properties: [String: DBusValue] = ["Address": .string(address), "Powered": .boolean(true)]
            try tree.addInterfaces(path, .dictionary(
                key: .string, value: .dictionary(key: .string, value: .variant),
                [.init(.string(BlueZ.adapterInterface), .vardict(properties))]))
        }
        return tree
    }

    static func resolver(_ bluez: TetherConfig.BlueZSection = .init()) -> LinkResolver {
        LinkResolver(config: TetherConfig(bluez: bluez, dongle: .init(address: dongle)))
    }

    @Test(arguments: [
        TetherConfig.BlueZSection(), .init(adapter: "hci0"), .init(adapterAddress: real),
    ])
    func anAdapterOnAPlaceholderIsSetAsideUntilItHasItsAddress(bluez: TetherConfig.BlueZSection) throws {
        let resolver = Self.resolver(bluez)
        let early = resolver.resolve(try Self.tree([("hci0", "AA:AA:AA:AA:AA:AA")]), bluezPresent: true)
        #expect(early.adapter == nil)
        #expect(early.placeholder?.interfaceName == "hci0")
        #expect(early.observation.adapterPresent == false)
        let later = resolver.resolve(try Self.tree([("hci0", Self.real)]), bluezPresent: true)
        #expect(later.adapter?.address == Self.real)
        #expect(later.placeholder == nil)
    }

    /// The adapter used last is found again by its address; a placeholder
    /// never becomes that address, and another real adapter is taken meanwhile.
    @Test func anotherAdapterIsTakenWhileOneIsOnAPlaceholder() throws {
        let resolver = Self.resolver()
        let both = try Self.tree([("hci0", "43:45:C0:00:1F:AC"), ("hci1", "00:1A:7D:DA:71:13")])
        let resolution = resolver.resolve(both, bluezPresent: true)
        #expect(resolution.adapter?.interfaceName == "hci1")
        #expect(resolution.placeholder == nil)
    }

    @Test func theKnownPlaceholdersAreTheChipsDefaults() {
        #expect(PlaceholderAddress.kind(of: "aa:aa:aa:aa:aa:aa") == "BCM43430A1's default")
        #expect(PlaceholderAddress.kind(of: "43:45:C0:00:1F:AC") == "BCM4345C0's default")
        #expect(PlaceholderAddress.kind(of: Self.real) == nil)
    }

    /// The kernel holds such a controller unconfigured (bluetoothd lists no
    /// adapter for it): no failed initialisation, no USB round for it.
    @Test func anUnconfiguredControllerAwaitsItsAddressAndIsNoFailure() {
        var check = ControllerInitCheck(name: nil, address: nil)
        let waiting = KernelController(name: "hci0", index: 0, up: false, settingUp: false, address: "AA:AA:AA:AA:AA:AA", bus: .uart)
        for second in [0, 1, 4, 10, 60] {
            #expect(check.check(kernel: [waiting], listed: [], at: .seconds(second)) == nil)
        }
        #expect(check.awaitingAddress == waiting)
        #expect(check.failed == nil)
        // All zeros is still the sign of a set-up that failed before reading an address.
        let failed = KernelController(name: "hci1", index: 1, up: false, settingUp: false, address: "00:00:00:00:00:00", bus: .usb)
        _ = check.check(kernel: [waiting, failed], listed: [], at: .seconds(61))
        #expect(check.check(kernel: [waiting, failed], listed: [], at: .seconds(65)) == .failed(failed))
    }

    @Test func theProblemSaysWhatTetherWaitsFor() {
        #expect(ControllerIdentity.placeholderProblem(name: "hci0", address: "AA:AA:AA:AA:AA:AA", kind: "BCM43430A1's default", configured: Self.real)
            == "hci0 is on the placeholder address AA:AA:AA:AA:AA:AA (BCM43430A1's default), not an address of its own yet (on a Raspberry Pi, bthelper sets it after boot; by hand: btmgmt --index 0 public-addr ADDRESS); BlueZ keeps its pairings under the real address, so Tether waits for B8:27:EB:12:34:56, as [bluez] adapter says")
    }
}
