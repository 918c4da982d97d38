import Configuration
import ControlAPI
import DBus
import FoundationEssentials
import Testing

@Suite struct ControlAddressTests {
    @Test func namesAndPathsPerInstance() throws {
        let plain = ControlAddress(instance: .default)
        #expect(plain.busName == "io.tether.Tether" && plain.path == "/io/tether/Tether")
        let east = ControlAddress(instance: try InstanceName("east"))
        #expect(east.busName == "io.tether.Tether.east" && east.path == "/io/tether/Tether/east")
        // What D-Bus does not allow is escaped, and distinct names stay distinct.
        let cases = ["a-b": "a_2db", "a_b": "a_5fb", "1x": "_31x", "x1": "x1"]
        for (instance, element) in cases {
            let address = ControlAddress(instance: try InstanceName(instance))
            #expect(address.busName == "io.tether.Tether.\(element)", "\(instance)")
            #expect(address.path.rawValue == "/io/tether/Tether/\(element)", "\(instance)")
        }
    }

    @Test func statusSurvivesTheTripThroughProperties() throws {
        let status = LinkStatus(
            state: .backingOff, device: "AA:BB:CC:DD:EE:FF", adapter: "hci0", readingsWritten: 1200, readingsPending: 340,
            readingsDropped: 7, readingsError: "cannot write readings to /var/lib/tether/readings: Read-only file system",
            reconnects: 3, windowAttempt: 2,
            nextAttemptIn: .milliseconds(1500), lastError: "org.bluez.Error.Failed: le-connection-abort-by-local",
            controller: "UART (hci_uart_bcm on serial0-0)"
        )
        let back = try LinkStatus(properties: status.signalledProperties.merging(status.liveProperties) { $1 })
        #expect(back == status)
        var broken = status.signalledProperties.merging(status.liveProperties) { $1 }
        broken["State"] = .uint32(1)
        #expect(throws: DBusError.self) { try LinkStatus(properties: broken) }
    }

    @Test func systemdsStatusLineSaysWhenReadingsAreNotStored() {
        let now = Date()
        var status = LinkStatus(state: .online, device: "AA:BB:CC:DD:EE:FF", lastReadingAt: now.addingTimeInterval(-2))
        #expect(status.summary(now: now) == "online AA:BB:CC:DD:EE:FF, last reading 2s ago")
        status.readingsPending = 340
        status.readingsError = "the disk has not answered a write in /var/lib/tether/readings for 9s"
        #expect(status.summary(now: now) == "online AA:BB:CC:DD:EE:FF, last reading 2s ago; readings NOT STORED (340 waiting in memory): the disk has not answered a write in /var/lib/tether/readings for 9s")
    }
}
