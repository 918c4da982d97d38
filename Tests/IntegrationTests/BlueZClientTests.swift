import BlueZ
import DBus
import Simulator
import TestSupport
import Testing

/// The typed client against the simulated bluetoothd.
@Suite(.serialized) struct BlueZClientTests {
    @Test func followsTheTreeAndResynchronisesAfterFallingBehind() async throws {
        let directory = try TemporaryDirectory("bluez-client")
        let daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        var options = SimulatorOptions()
        options.notifyRate = 2000
        let simulator = try await Simulator.start(busAddress: daemon.address, options: options)
        let bus = try await Bus.connect(address: daemon.address)
        defer { daemon.stop(); directory.remove() }

        let client = BlueZClient(bus: bus)
        // A tiny buffer and a consumer that dawdles: signals will be lost.
        let events = try await client.events(bufferLimit: 16)
        var iterator = events.makeAsyncIterator()
        guard case .serviceAppeared(_, let initial)? = await iterator.next() else {
            Issue.record("the first event is not serviceAppeared")
            return
        }
        let device = try #require(initial.devices.first)
        #expect(initial.characteristics(of: device.path).isEmpty, "no GATT objects before connecting")

        try await client.connect(device.path, timeout: .seconds(5))
        let tx = try #require(Device.path(adapter: "/org/bluez/hci0", address: device.address)?.appending("service000a")?.appending("char000d"))
        #expect(await eventually { (try? await client.managedObjects().objects[tx]) != nil })
        try await client.startNotify(tx)

        var tree = initial
        var lost = 0
        var resynced = false
        for _ in 0..<400 {
            guard let event = await iterator.next() else { break }
            if case .signalsLost(let count) = event { lost += count }
            if case .serviceAppeared = event, lost > 0 { resynced = true }
            tree.apply(event)
            if resynced { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(lost > 0)
        #expect(resynced, "a fresh snapshot follows the loss")
        #expect(tree.device(device.path)?.connected == true)
        #expect(tree.characteristic(uuid: "6e400003-b5a3-f393-e0a9-e50e24dcca9e", of: device.path) != nil)
        await bus.close()
        await simulator.stop()
    }
}
