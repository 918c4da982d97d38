@testable import Configuration
import Foundation
import Testing

/// `[dongle] silence_limit`: parsing, the automatic default, what
/// check-config rejects and what it warns about.
@Suite struct SilenceLimitConfigTests {
    static let file = "/etc/tether/tether.toml"
    static func parse(_ dongle: String, keepalive: String = "") throws -> TetherConfig {
        try TetherConfig.parse("[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\(dongle)\n[keepalive]\n\(keepalive)\n", file: file)
    }

    @Test func absentMeansTwentySecondsOrTwoKeepAliveIntervals() throws {
        #expect(try Self.parse("").silenceLimit == .seconds(20))
        #expect(try Self.parse("", keepalive: "interval = \"15s\"\nsleep_after = \"60s\"").silenceLimit == .seconds(30))
        #expect(try Self.parse("", keepalive: "enabled = false").silenceLimit == .seconds(20))
        #expect(try Self.parse("").warnings.isEmpty)
    }

    @Test func aLimitOrOff() throws {
        let config = try Self.parse("silence_limit = \"90s\"")
        #expect(config.dongle.silenceLimit == .after(.seconds(90)))
        #expect(config.silenceLimit == .seconds(90))
        #expect(config.warnings.isEmpty)
        let off = try Self.parse("silence_limit = \"off\"")
        #expect(off.silenceLimit == nil)
        #expect(off.warnings.map(\.key) == ["dongle.silence_limit"])
        #expect(off.warnings.first?.line == 3)
        #expect(off.warnings.first?.message.contains("online with no data") == true)
    }

    @Test func aLimitShorterThanTheKeepAliveIntervalIsRejected() {
        #expect {
            try Self.parse("silence_limit = \"3s\"")
        } throws: { error in
            let error = error as? ConfigError
            return error?.key == "dongle.silence_limit" && error?.line == 3
                && error?.message.contains("shorter than keepalive.interval (5s)") == true
        }
    }

    @Test func aLimitUnderTwoIntervalsIsAWarning() throws {
        let config = try Self.parse("silence_limit = \"8s\"")
        #expect(config.silenceLimit == .seconds(8))
        #expect(config.warnings.count == 1)
        #expect(config.warnings.first?.message.contains("two keep-alive intervals (10s)") == true)
        // Without a keep-alive the interval does not bind.
        #expect(try Self.parse("silence_limit = \"2s\"", keepalive: "enabled = false").warnings.isEmpty)
    }

    @Test(arguments: ["\"0s\"", "\"soon\"", "30", "\"-5s\"", "\"Off\""])
    func badValuesAreErrorsNamingTheKey(_ value: String) {
        #expect {
            try Self.parse("silence_limit = \(value)")
        } throws: { error in
            (error as? ConfigError)?.key == "dongle.silence_limit"
        }
    }

    @Test func theShippedExampleTurnsItOnAndCatchesAHungDongleWithinThirtySeconds() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/tether.toml")
        let config = try TetherConfig.load(path: example.path)
        let limit = try #require(config.silenceLimit)
        #expect(limit <= .seconds(30))
        #expect(limit >= config.keepalive.interval * 2)
        #expect(config.warnings.isEmpty)
    }
}

/// `[bluez] adapter` by name or by the controller's address.
@Suite struct AdapterConfigTests {
    static func parse(_ adapter: String) throws -> TetherConfig {
        try TetherConfig.parse("[bluez]\nadapter = \(adapter)\n[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n", file: "t.toml")
    }

    @Test func anAddressNamesTheController() throws {
        let config = try Self.parse("\"00:1a:7d:da:71:13\"")
        #expect(config.bluez.adapterAddress == "00:1A:7D:DA:71:13")
        #expect(config.bluez.adapter == nil)
        #expect(try Self.parse("\"hci1\"").bluez.adapter == "hci1")
    }

    @Test func aMalformedAddressIsAnError() {
        #expect {
            try Self.parse("\"00:1a:7d:da:71\"")
        } throws: { error in
            (error as? ConfigError)?.message.contains("controller address such as") == true
        }
    }
}
