import HCI
import Testing

/// The management events Tether reads, from bytes as the kernel writes them
/// (doc/mgmt-api.txt: little-endian header and parameters).
@Suite struct ManagementEventTests {
    @Test(arguments: [(UInt8(0), UInt8(0)), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (9, 9)])
    func deviceDisconnectedCarriesAddressAndReason(code: UInt8, expected: UInt8) {
        // opcode 0x000C, index 1, length 8; address F1:E2:D3:C4:B5:A6 reversed; LE random (2).
        let bytes: [UInt8] = [0x0C, 0x00, 0x01, 0x00, 0x08, 0x00, 0xA6, 0xB5, 0xC4, 0xD3, 0xE2, 0xF1, 0x02, code]
        #expect(
            ManagementEvent(datagram: bytes)
                == .deviceDisconnected(index: 1, address: "F1:E2:D3:C4:B5:A6", addressType: 2, reason: expected)
        )
    }

    @Test func leadingZerosOfAnAddressAreKept() {
        let bytes: [UInt8] = [0x0C, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0xAA, 0x00, 0x01, 0x03]
        #expect(ManagementEvent(datagram: bytes) == .deviceDisconnected(index: 0, address: "00:AA:01:01:00:01", addressType: 1, reason: 3))
    }

    @Test func indexEvents() {
        #expect(ManagementEvent(datagram: [0x04, 0x00, 0x02, 0x00, 0x00, 0x00]) == .indexAdded(index: 2))
        #expect(ManagementEvent(datagram: [0x05, 0x00, 0xFF, 0x00, 0x00, 0x00]) == .indexRemoved(index: 255))
        #expect(ManagementEvent(datagram: [0x06, 0x00, 0x00, 0x00, 0x01, 0x00, 0x07]) == .other(opcode: 6, index: 0))
    }

    @Test(arguments: [
        [UInt8](),
        [0x0C, 0x00, 0x00, 0x00, 0x08],  // short header
        [0x0C, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x02],  // shorter than its length
        [0x0C, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x02],  // a Device Disconnected too short to hold its fields
    ])
    func malformedDatagramsAreRefused(bytes: [UInt8]) {
        #expect(ManagementEvent(datagram: bytes) == nil)
    }

    @Test func openingWithoutBluetoothSaysWhy() {
        // This machine's kernel may or may not have Bluetooth: either the
        // socket opens, or the failure names the cause; it never crashes.
        switch ManagementSocket.open() {
        case .success(let socket):
            #expect(socket.descriptor >= 0)
            _ = socket.readEvents()
            #expect(socket.failure == nil, "an empty queue is not a failure")
            socket.close()
            #expect(socket.descriptor == -1)
        case .failure(let failure):
            #expect(!failure.description.isEmpty)
        }
    }
}
