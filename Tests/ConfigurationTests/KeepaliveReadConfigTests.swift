@testable import Configuration
import Testing

/// A keep-alive that reads: what check-config refuses because bluetoothd
/// would make its answers look like the dongle's notifications.
@Suite struct KeepaliveReadConfigTests {
    static let file = "/etc/tether/tether.toml"
    static let sensor = "00002a19-0000-1000-8000-00805f9b34fb"

    static func text(characteristic: String, notifyPath: String? = nil) -> String {
        """
        [dongle]
        address = "aa:bb:cc:dd:ee:ff"
        \(notifyPath.map { "notify_path = \"\($0)\"" } ?? "")
        [keepalive]
        write = ""
        characteristic = "\(characteristic)"
        """
    }

    @Test func readingTheNotifyCharacteristicIsRefused() {
        let error = configRefusal(Self.text(characteristic: ConfigUUID.nusTX.uppercased()))
        #expect(error?.key == "keepalive.characteristic")
        #expect(error?.line == 6)
        #expect(error?.message.contains("dongle.notify subscribes to") == true)
        #expect(error?.message.contains("acquire-notify") == true)
    }

    @Test func readingTheNotifyCharacteristicThroughAnAcquiredSocketIsAllowed() throws {
        let config = try TetherConfig.parse(Self.text(characteristic: ConfigUUID.nusTX, notifyPath: "acquire-notify"), file: Self.file)
        #expect(config.keepalive.write == nil)
    }

    @Test func readingAnotherCharacteristicIsAllowed() throws {
        let config = try TetherConfig.parse(Self.text(characteristic: Self.sensor), file: Self.file)
        #expect(config.keepalive.characteristic == Self.sensor)
        #expect(config.keepalive.write == nil)
    }
}
