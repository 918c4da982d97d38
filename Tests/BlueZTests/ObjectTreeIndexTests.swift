@testable import BlueZ
import DBus
import Pacing
import Testing

/// The tree's role indexes against what a scan of every object finds,
/// after each step of random sequences of InterfacesAdded,
/// InterfacesRemoved and PropertiesChanged (addresses changing among them,
/// as BlueZ moves a paired dongle to its identity address).
@Suite struct ObjectTreeIndexTests {
    static let adapters: [ObjectPath] = ["/org/bluez/hci0", "/org/bluez/hci1"]
    static let addresses = ["AA:BB:CC:DD:EE:01", "aa:bb:cc:dd:ee:02", "AA:BB:CC:DD:EE:03"]

    static func anyPath(_ random: inout SplitMix64) -> ObjectPath {
        let adapter = adapters[Int(random.next() % 2)]
        switch random.next() % 4 {
        case 0: return adapter
        case 1: return ObjectPath(adapter.rawValue + "/dev_0\(random.next() % 4)") ?? adapter
        default: return ObjectPath(adapter.rawValue + "/dev_0\(random.next() % 4)/service000a/char000\(random.next() % 3)") ?? adapter
        }
    }

    static func anyInterfaces(_ random: inout SplitMix64) -> [String: [String: DBusValue]] {
        var result: [String: [String: DBusValue]] = [:]
        let address = DBusValue.string(addresses[Int(random.next() % 3)])
        if random.next() % 3 == 0 { result[BlueZ.adapterInterface] = ["Address": address, "Powered": .boolean(true)] }
        if random.next() % 2 == 0 {
            result[BlueZ.deviceInterface] = random.next() % 4 == 0 ? ["Connected": .boolean(false)] : ["Address": address]
        }
        if random.next() % 3 == 0 { result[BlueZ.gattCharacteristicInterface] = ["UUID": .string("2a19"), "Flags": .strings(["read"])] }
        return result
    }

    /// What the indexed views must answer, found the slow way.
    static func scanned(_ tree: ObjectTree) -> (adapters: [ObjectPath], devices: [ObjectPath], byAddress: [String: [ObjectPath]]) {
        let paths = tree.objects.keys.sorted()
        let adapters = paths.filter { tree.objects[$0]?[BlueZ.adapterInterface] != nil }
        let devices = paths.filter { tree.objects[$0]?[BlueZ.deviceInterface] != nil }
        var byAddress: [String: [ObjectPath]] = [:]
        for path in devices {
            byAddress[(tree.objects[path]?[BlueZ.deviceInterface]?["Address"]?.string ?? "").uppercased(), default: []].append(path)
        }
        return (adapters, devices, byAddress)
    }

    @Test(arguments: 1...40 as ClosedRange<UInt64>)
    func indexesAgreeWithAScanOfEveryObject(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        var tree = ObjectTree()
        for step in 0..<200 {
            let path = Self.anyPath(&random)
            switch random.next() % 4 {
            case 0:
                try tree.addInterfaces(path, ObjectTreeTests.interfaces(Self.anyInterfaces(&random)))
            case 1:
                let names = [BlueZ.adapterInterface, BlueZ.deviceInterface, BlueZ.gattCharacteristicInterface]
                tree.removeInterfaces(path, names.filter { _ in random.next() % 2 == 0 })
            default:
                let address = Self.addresses[Int(random.next() % 3)]
                if random.next() % 5 == 0 {
                    tree.changeProperties(path, interface: BlueZ.deviceInterface, changed: [:], invalidated: ["Address"])
                } else {
                    tree.changeProperties(path, interface: BlueZ.deviceInterface, changed: ["Address": .variant(.string(address))], invalidated: [])
                }
            }
            let expected = Self.scanned(tree)
            #expect(tree.adapters.map(\.path) == expected.adapters, "seed \(seed) step \(step)")
            #expect(tree.devices.map(\.path) == expected.devices, "seed \(seed) step \(step)")
            for address in Set(Self.addresses.map { $0.uppercased() } + [""]) {
                #expect(tree.devices(address: address).map(\.path) == expected.byAddress[address] ?? [], "seed \(seed) step \(step) \(address)")
            }
            for device in expected.devices {
                let characteristics = tree.objects.keys.sorted().filter {
                    $0 != device && $0.isDescendant(of: device) && tree.objects[$0]?[BlueZ.gattCharacteristicInterface] != nil
                }
                #expect(tree.characteristics(of: device).map(\.path) == characteristics, "seed \(seed) step \(step)")
            }
        }
    }

    /// Two trees holding the same objects are equal however they were built
    /// (the daemon compares resolutions, and the fuzz target trees).
    @Test func theSameObjectsMakeEqualTreesWhateverTheOrder() throws {
        let first: ObjectPath = "/org/bluez/hci0/dev_01"
        let second: ObjectPath = "/org/bluez/hci0/dev_02"
        let device = ObjectTreeTests.interfaces([BlueZ.deviceInterface: ["Address": .string("AA:BB:CC:DD:EE:01")]])
        var one = ObjectTree()
        try one.addInterfaces(first, device)
        try one.addInterfaces(second, device)
        var other = ObjectTree()
        try other.addInterfaces(second, device)
        try other.addInterfaces(first, device)
        #expect(one == other)
        #expect(one.devices(address: "AA:BB:CC:DD:EE:01").map(\.path) == [first, second])
    }
}
