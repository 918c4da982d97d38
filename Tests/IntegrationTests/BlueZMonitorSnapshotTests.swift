import BlueZ
import DBus
import EventLoop
import Synchronization
import TestSupport
import Testing

/// bluetoothd that owns its name but gives no object tree (hung, or refusing
/// this client) must not pass for a bluetoothd without adapters: its
/// adapter and dongle already exist, and it never announces them again.
/// Against a real dbus-daemon, with a stand-in for bluetoothd that refuses
/// `GetManagedObjects` a number of times and then answers.
@Suite struct BlueZMonitorSnapshotTests {
    /// The stand-in's tree: one powered adapter.
    static let tree: DBusValue = .dictionary(
        key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)),
        [
            .init(.objectPath("/org/bluez/hci0"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                .init(.string(BlueZ.adapterInterface), .vardict(["Powered": .boolean(true), "Address": .string("00:11:22:33:44:55")]))
            ]))
        ]
    )

    @Test func aBluetoothdThatRefusesItsTreeIsReportedOnceAndAskedAgainUntilItAnswers() async throws {
        let directory = try TemporaryDirectory("bluez-monitor")
        let daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        let bluetoothd = try await Bus.connect(address: daemon.address)
        let calls = Atomic(0)
        let refusals = 5
        try await bluetoothd.requestName(BlueZ.service)
        try await bluetoothd.export(.root, [
            ExportedInterface(name: StandardInterface.objectManager, methods: [
                "GetManagedObjects": .init(out: "a{oa{sa{sv}}}") { _ in
                    if calls.add(1, ordering: .relaxed).newValue <= refusals {
                        throw DBusError.remote(name: "org.freedesktop.DBus.Error.AccessDenied", message: "refused by the stand-in")
                    }
                    return [Self.tree]
                },
            ])
        ])

        let loop = EventLoop(name: "monitor-under-test")
        let bus = try await Bus.connect(address: daemon.address, on: loop)
        let events = Mutex<[BlueZEvent]>([])
        let monitor = BlueZMonitor(client: BlueZClient(bus: bus)) { event in events.withLock { $0.append(event) } }
        try await monitor.start { message in monitor.handle(message) }
        let started = ContinuousClock.now
        loop.execute { monitor.queryOwner() }

        let appeared = await eventually(timeout: .seconds(20), every: .milliseconds(50)) {
            events.withLock { $0.contains { if case .serviceAppeared = $0 { true } else { false } } }
        }
        let took = ContinuousClock.now - started
        let seen = events.withLock { $0 }
        await monitor.stop()
        await bus.close()
        loop.stop()
        await bluetoothd.close()
        daemon.stop()
        directory.remove()

        #expect(appeared, "the tree never came: \(seen)")
        // Said once, with bluetoothd's error, before the tree.
        guard seen.count == 2, case .serviceUnanswered(_, let error) = seen[0], case .serviceAppeared(_, let tree) = seen[1] else {
            Issue.record("expected serviceUnanswered then serviceAppeared, got \(seen)")
            return
        }
        #expect(error.name == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(tree.adapters.map(\.path.rawValue) == ["/org/bluez/hci0"])
        #expect(calls.load(ordering: .relaxed) == refusals + 1)
        // Five quick tries (0.1 + 0.2 + 0.4 + 0.8 s between them), then 5 s to the one answered.
        #expect(took >= .seconds(6) && took < .seconds(15), "\(took)")
        print("figure: bluetoothd refusing GetManagedObjects \(refusals) times: reported once, tree taken \(took) after start")
    }
}
