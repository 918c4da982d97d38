@testable import Configuration
import Foundation
import LinkPolicy
import Pacing
import Testing

private let file = "/etc/tether/tether.toml"

/// Lines 1-3; whatever is appended starts on line 4.
private let minimal = "[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n\n"

@Suite("Config file")
struct ConfigParsingTests {
    @Test func fullFileParsesToExpectedValues() throws {
        let text = """
        # Tether configuration
        [bluez]
        adapter = "hci1"

        [dongle]
        address = "aa:bb:cc:dd:ee:0f"
        name_prefix = "Sensor"
        service_uuid = "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"
        notify = ["6e400003-b5a3-f393-e0a9-e50e24dcca9e", "0x2A19"]
        notify_path = "acquire-notify"

        [keepalive]
        enabled = false
        interval = "10s"
        characteristic = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
        write = "A1b2"
        write_type = "request"
        timeout = "1500ms"
        sleep_after = "1m"

        [reconnect]
        first_delay = "250ms"
        initial_backoff = "2s"
        max_backoff = "1m30s"
        jitter = 0.5
        connect_timeout = "15s"
        window = "10m"
        window_attempts = 5
        cooldown = "1h"
        escalate = ["hci-reset", "power-cycle"]
        scan_stall_after = "90s"

        [readings]
        directory = "/srv/readings"
        flush_interval = "0.5s"
        rotate_size = "8MiB"
        retain_size = "100MB"
        max_backlog = 500
        """
        let config = try TetherConfig.parse(text, file: file)
        let expected = TetherConfig(
            bluez: .init(adapter: "hci1"),
            dongle: .init(
                address: "AA:BB:CC:DD:EE:0F",
                namePrefix: "Sensor",
                serviceUUID: ConfigUUID.nusService,
                notify: [ConfigUUID.nusTX, "00002a19-0000-1000-8000-00805f9b34fb"],
                notifyPath: .acquireNotify
            ),
            keepalive: .init(
                enabled: false, interval: .seconds(10), characteristic: ConfigUUID.nusRX, write: [0xa1, 0xb2],
                writeType: .request, timeout: .milliseconds(1500), sleepAfter: .seconds(60)
            ),
            reconnect: .init(
                policy: ReconnectPolicy(
                    firstDelay: .milliseconds(250), initialBackoff: .seconds(2), maxBackoff: .seconds(90), jitter: 0.5,
                    connectTimeout: .seconds(15), window: .seconds(600), windowAttempts: 5, cooldown: .seconds(3600)
                ),
                escalate: [.hciReset, .powerCycle], scanStallAfter: .seconds(90)
            ),
            readings: .init(
                directory: "/srv/readings", flushInterval: .milliseconds(500), rotateSize: 8 << 20,
                retainSize: 100_000_000, maxBacklog: 500
            )
        )
        #expect(config == expected)
    }

    @Test func scanStallAfterIsReadWithItsDefault() throws {
        let configured = try TetherConfig.parse(minimal + "[reconnect]\nscan_stall_after = \"45s\"\n", file: file)
        #expect(configured.reconnect.scanStallAfter == .seconds(45))
        let omitted = try TetherConfig.parse(minimal, file: file)
        #expect(omitted.reconnect.scanStallAfter == .seconds(120))
    }

    @Test func omittedKeysTakeDefaults() throws {
        let config = try TetherConfig.parse(minimal, file: file)
        #expect(config == TetherConfig.defaults(address: "AA:BB:CC:DD:EE:FF"))
        #expect(config.bluez.adapter == nil)
        #expect(config.dongle.notify == [ConfigUUID.nusTX])
        #expect(config.keepalive == .init(
            enabled: true, interval: .seconds(5), characteristic: ConfigUUID.nusRX, write: [0],
            writeType: .command, timeout: .seconds(3), sleepAfter: .seconds(30)))
        #expect(config.reconnect == .init(
            policy: ReconnectPolicy(
                firstDelay: .zero, initialBackoff: .seconds(1), maxBackoff: .seconds(30), jitter: 0.2,
                connectTimeout: .seconds(20), window: .seconds(180), windowAttempts: 12, cooldown: .seconds(300)
            ),
            escalate: []))
        #expect(config.readings == .init(
            directory: "/var/lib/tether/readings", flushInterval: .seconds(1), rotateSize: 64 << 20,
            retainSize: 1 << 30, maxBacklog: 100_000))
    }

    @Test func dongleCanBeIdentifiedByNameOrService() throws {
        let byName = try TetherConfig.parse("[dongle]\nname_prefix = \"Nordic\"\n", file: file)
        #expect(byName.dongle.namePrefix == "Nordic")
        #expect(byName.dongle.address == nil)
        let byService = try TetherConfig.parse("[dongle]\nservice_uuid = \"180f\"\n", file: file)
        #expect(byService.dongle.serviceUUID == "0000180f-0000-1000-8000-00805f9b34fb")
    }

    @Test func emptyWriteMeansPollWithARead() throws {
        let config = try TetherConfig.parse(minimal + "[keepalive]\nwrite = \"\"\ncharacteristic = \"2a19\"\n", file: file)
        #expect(config.keepalive.write == nil)
        // NUS RX, the default characteristic, cannot be read.
        let error = try #require(configRefusal(minimal + "[keepalive]\nwrite = \"\"\n"))
        #expect(error.key == "keepalive.write")
    }

    @Test func sizesMayBePlainIntegersAndJitterAnInteger() throws {
        let config = try TetherConfig.parse(minimal + "[readings]\nrotate_size = 8192\n[reconnect]\njitter = 0\n", file: file)
        #expect(config.readings.rotateSize == 8192)
        #expect(config.reconnect.jitter == 0)
    }

    @Test func badDurationNamesFileLineKeyAndValue() throws {
        let text = minimal + "[keepalive]\ninterval = \"5 parsecs\"\n"
        let error = try #require(configRefusal(text))
        #expect(error.line == 5)
        #expect(error.key == "keepalive.interval")
        #expect(error.description == #"/etc/tether/tether.toml:5: keepalive.interval: expected a duration such as "250ms", "5s" or "3m", got "5 parsecs""#)
    }

    @Test func unknownKeyIsNamed() throws {
        let error = try #require(configRefusal(minimal + "[keepalive]\ninterval = \"5s\"\nintervall = \"5s\"\n"))
        #expect(error.key == "keepalive.intervall")
        #expect(error.line == 6)
        #expect(error.message.contains("unknown key"))
    }

    @Test func firstUnknownKeyInTheFileIsReported() throws {
        let error = try #require(configRefusal(minimal + "[readings]\nzzz = 1\naaa = 2\n"))
        #expect(error.key == "readings.zzz")
        #expect(error.line == 5)
    }

    @Test func unknownTableIsNamed() throws {
        let error = try #require(configRefusal(minimal + "[keepalives]\ninterval = \"5s\"\n"))
        #expect(error.key == "keepalives")
        #expect(error.line == 4)
        #expect(error.message.contains("unknown table [keepalives]"))
    }

    @Test func topLevelKeyIsUnknown() throws {
        let error = try #require(configRefusal("verbose = true\n" + minimal))
        #expect(error.key == "verbose")
        #expect(error.line == 1)
    }

    @Test func nestedTableIsAnUnknownKey() throws {
        let error = try #require(configRefusal(minimal + "[dongle.extra]\nx = 1\n"))
        #expect(error.key == "dongle.extra")
        #expect(error.line == 4)
    }

    @Test func wrongTypeSaysWhatWasExpected() throws {
        let cases: [(String, String, Int, String)] = [
            ("[keepalive]\ninterval = 5\n", "keepalive.interval", 5, "got an integer"),
            ("[keepalive]\nenabled = \"yes\"\n", "keepalive.enabled", 5, "expected true or false, got a string"),
            ("[bluez]\nadapter = 0\n", "bluez.adapter", 5, "expected a string, got an integer"),
            ("[reconnect]\nwindow_attempts = \"3\"\n", "reconnect.window_attempts", 5, "expected an integer, got a string"),
            ("[reconnect]\nescalate = \"hci-reset\"\n", "reconnect.escalate", 5, "expected an array of strings, got a string"),
            ("[reconnect]\nescalate = [\"hci-reset\", 2]\n", "reconnect.escalate", 5, "element 2 is an integer"),
            ("[readings]\nrotate_size = 1.5\n", "readings.rotate_size", 5, "got a floating-point number"),
        ]
        for (snippet, key, line, message) in cases {
            let error = try #require(configRefusal(minimal + snippet))
            #expect(error.key == key, "\(snippet)")
            #expect(error.line == line, "\(snippet)")
            #expect(error.message.contains(message), "\(error)")
        }
        let notATable = try #require(configRefusal("keepalive = 3\n" + minimal))
        #expect(notATable.key == "keepalive")
        #expect(notATable.line == 1)
        #expect(notATable.message == "expected a table [keepalive], got an integer")
    }

    @Test func intervalMustBeAtMostHalfOfSleepAfter() throws {
        let text = minimal + "[keepalive]\nsleep_after = \"30s\"\ninterval = \"20s\"\ntimeout = \"1s\"\n"
        let error = try #require(configRefusal(text))
        #expect(error.key == "keepalive.interval")
        #expect(error.line == 6)
        #expect(error.message.contains("20s"))
        #expect(error.message.contains("30s"))
        // Exactly half is fine.
        let ok = minimal + "[keepalive]\nsleep_after = \"30s\"\ninterval = \"15s\"\n"
        #expect(try TetherConfig.parse(ok, file: file).keepalive.interval == .seconds(15))
    }

    @Test func crossFieldErrorBlamesTheKeyPresentInTheFile() throws {
        // interval keeps its default 5s; the edited key is sleep_after.
        let error = try #require(configRefusal(minimal + "[keepalive]\nsleep_after = \"8s\"\n"))
        #expect(error.key == "keepalive.sleep_after")
        #expect(error.line == 5)
        #expect(error.message.contains("5s") && error.message.contains("8s"))
    }

    @Test func badAddressIsRejected() throws {
        for address in ["AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:GG", "AABBCCDDEEFF", "AA:BB:CC:DD:EE:FF:00", "A:BB:CC:DD:EE:FFF"] {
            let error = try #require(configRefusal("[dongle]\n\naddress = \"\(address)\"\n"))
            #expect(error.key == "dongle.address")
            #expect(error.line == 3)
            #expect(error.message.contains(address))
        }
    }

    @Test func syntaxErrorGivesTheParserLine() throws {
        let error = try #require(configRefusal(minimal + "[keepalive]\ninterval = \"5s\n"))
        #expect(error.line == 5)
        #expect(error.key == nil)
        #expect(error.description.hasPrefix("/etc/tether/tether.toml:5: TOML syntax error"))
    }

    @Test func dongleMustBeIdentified() throws {
        let missingKeys = try #require(configRefusal("[bluez]\n\n[dongle]\nnotify = [\"2a19\"]\n"))
        #expect(missingKeys.key == "dongle")
        #expect(missingKeys.line == 3)
        let missingTable = try #require(configRefusal(""))
        #expect(missingTable.key == "dongle")
        #expect(missingTable.line == nil)
        #expect(missingTable.description == "/etc/tether/tether.toml: dongle: identify the dongle with address, name_prefix and/or service_uuid")
    }

    @Test func valueRulesAreEnforced() throws {
        let cases: [(String, String)] = [
            ("[keepalive]\ntimeout = \"0s\"\n", "keepalive.timeout"),
            ("[keepalive]\ntimeout = \"6s\"\n", "keepalive.timeout"),
            ("[keepalive]\ninterval = \"0s\"\n", "keepalive.interval"),
            ("[keepalive]\nwrite = \"abc\"\n", "keepalive.write"),
            ("[keepalive]\nwrite = \"zz\"\n", "keepalive.write"),
            ("[keepalive]\nwrite_type = \"fast\"\n", "keepalive.write_type"),
            ("[keepalive]\ncharacteristic = \"not-a-uuid\"\n", "keepalive.characteristic"),
            ("[reconnect]\njitter = 1.0\n", "reconnect.jitter"),
            ("[reconnect]\njitter = -0.1\n", "reconnect.jitter"),
            ("[reconnect]\njitter = nan\n", "reconnect.jitter"),
            ("[reconnect]\ninitial_backoff = \"1m\"\n", "reconnect.initial_backoff"),
            ("[reconnect]\nwindow_attempts = 0\n", "reconnect.window_attempts"),
            ("[reconnect]\nfirst_delay = \"-1s\"\n", "reconnect.first_delay"),
            ("[reconnect]\nconnect_timeout = \"0s\"\n", "reconnect.connect_timeout"),
            ("[reconnect]\ncooldown = \"0s\"\n", "reconnect.cooldown"),
            ("[reconnect]\nscan_stall_after = \"10s\"\n", "reconnect.scan_stall_after"),
            ("[reconnect]\nescalate = [\"reboot\"]\n", "reconnect.escalate"),
            ("[reconnect]\nescalate = [\"hci-reset\", \"hci-reset\"]\n", "reconnect.escalate"),
            ("[readings]\nrotate_size = \"4095B\"\n", "readings.rotate_size"),
            ("[readings]\nrotate_size = \"64MiB\"\nretain_size = \"32MiB\"\n", "readings.retain_size"),
            ("[readings]\nmax_backlog = 0\n", "readings.max_backlog"),
            ("[readings]\nmax_backlog = 100000000\n", "readings.max_backlog"),
            ("[readings]\nflush_interval = \"0s\"\n", "readings.flush_interval"),
            ("[readings]\nflush_interval = \"2h\"\n", "readings.flush_interval"),
            ("[reconnect]\nwindow = \"0s\"\n", "reconnect.window"),
            ("[readings]\ndirectory = \"relative/dir\"\n", "readings.directory"),
            ("[readings]\nretain_size = \"lots\"\n", "readings.retain_size"),
            ("[bluez]\nadapter = \"hci0/x\"\n", "bluez.adapter"),
        ]
        for (snippet, key) in cases {
            let error = try #require(configRefusal(minimal + snippet))
            #expect(error.key == key, "\(snippet) gave \(error)")
            #expect(error.line != nil, "\(snippet) gave \(error)")
        }
        let dongleCases: [(String, String)] = [
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nnotify = []\n", "dongle.notify"),
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nnotify = [\"xyz\"]\n", "dongle.notify"),
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nnotify = [\"2a19\", \"0x2A19\"]\n", "dongle.notify"),
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nname_prefix = \"\"\n", "dongle.name_prefix"),
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nnotify_path = \"acquire\"\n", "dongle.notify_path"),
            ("[dongle]\naddress = \"AA:BB:CC:DD:EE:FF\"\nservice_uuid = \"12345\"\n", "dongle.service_uuid"),
        ]
        for (text, key) in dongleCases {
            let error = try #require(configRefusal(text))
            #expect(error.key == key, "\(text) gave \(error)")
            #expect(error.line == 3, "\(text) gave \(error)")
        }
    }

    @Test func linesAreFoundForDottedKeysAndCRLFFiles() throws {
        let dotted = try #require(configRefusal("keepalive.interval = \"soon\"\n" + minimal))
        #expect(dotted.key == "keepalive.interval")
        #expect(dotted.line == 1)
        let crlf = try #require(configRefusal("[dongle]\r\naddress = \"AA:BB:CC:DD:EE:FF\"\r\n[keepalive]\r\ninterval = \"x\"\r\n"))
        #expect(crlf.line == 4)
        // Text in a multi-line string is not mistaken for a key.
        let multiline = try #require(configRefusal(
            "[dongle]\nname_prefix = \"\"\"\ninterval = 1\n\"\"\"\naddress = \"nope\"\n"))
        #expect(multiline.key == "dongle.address")
        #expect(multiline.line == 5)
    }

    @Test func nulByteIsAnErrorNotATruncation() throws {
        let error = try #require(configRefusal(minimal + "[keepalive]\u{0}\ninterval = \"bad\"\n"))
        #expect(error.line == 4)
        #expect(error.message.contains("NUL"))
    }

    /// Inputs that crash toml++ 3.4.0 itself (assertions, undefined behaviour); found by fuzzing.
    @Test(arguments: [
        ("[.ongle]\naddress = \"x\"\n", 1),
        ("[dongle]\n[ ,a]\n", 2),
        ("[[ .a]]\n", 1),
        ("x = é\n", 1),
        ("[dongle]\nname_prefix = 1é\n", 2),
        ("a é = 1\n", 1),
        ("x = {é=1}\n", 1),
        ("x = \"\"\"a\"\"\"\" é\n", 1),
        ("x = [0012e\"703é\"]\n", 1),
        ("-=-\"\"\"=1[\"jé\"]\n", 1),
        ("x = [}\n", 1),
        ("x = [\n# c\n}]\n", 3),
        ("x = { a = [ } ] }\n", 1),
        ("x = 1979-05-27 1\n", 1),
        ("x = [1979-05-27 0}2]\n", 1),
        ("x = 1979-05-27 1é\n", 1),
        ("x = \"\"\"a\\é\"\"\"\n", 1),
        ("x = \"\"\"a\\ \n\n é\"\"\"\n", 3),
        ("[bluez]\nadapter = \"\"\"\"h\n12D\\\né\n", 4),
        ("[dongle]\nd = 1979-05-27Tescalit07:32:00Z\n", 2),
        ("x = tru\n", 1),
        ("x = [1, 2, three]\n", 1),
        ("x = 1" + String(repeating: "0", count: 80) + "\n", 1),
    ] as [(String, Int)])
    func toxicInputsAreRejectedBeforeTOMLKit(text: String, line: Int) throws {
        let error = try #require(configRefusal(text))
        #expect(error.line == line)
        #expect(error.message.hasPrefix("TOML syntax error"))
    }

    @Test func validTOMLSurvivesThePrescreen() throws {
        let valid = #"""
            # comment with non-ASCII: é ☃
            [dongle] # trailing comment é
            "quoted é" = 'literal ☃'
            a."b é".c = """multi
            line é """"
            d = '''raw ''é'''
            e = [ [1, 2], ["é", 'x'], { k = "v" }, 1979-05-27T07:32:00Z, +1_000, 0x1F, -inf, ]
            f = { x = [ 1 ], y = { z = "é}" } }
            [[g]]
            h = "a\"b é"
            [ "h é" . i ]
            """#
        #expect(TOMLPrescreen.check(valid) == nil)
        // It gets past toml++ too: the complaint is about content, not syntax.
        let error = try #require(configRefusal(valid))
        #expect(!error.message.hasPrefix("TOML syntax error"), "\(error)")
    }

    /// Runs every file in $TETHER_CONFIG_CORPUS (e.g. a libFuzzer corpus) through the
    /// parser; skipped unless that variable is set.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["TETHER_CONFIG_CORPUS"] != nil))
    func corpusNeverCrashes() throws {
        let directory = ProcessInfo.processInfo.environment["TETHER_CONFIG_CORPUS"] ?? ""
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
            _ = try? TetherConfig.parse(String(decoding: data, as: UTF8.self), file: name)
        }
    }

    @Test(arguments: [
        "true", "false", "0", "-17", "+99", "1_000", "0xdead_BEEF", "0o755", "0b1101", "3.14", "-0.0", "5e+22",
        "1E6", "6.626e-34", "1_2.3_4e5_6", "inf", "-inf", "+nan", "1979-05-27", "07:32:00", "00:32:00.999999",
        "1979-05-27T07:32:00", "1979-05-27t07:32:00z", "1979-05-27 07:32:00.5-07:00", "1979-05-27T00:32:00+09:30",
    ])
    func wellFormedBareValues(text: String) {
        #expect(TOMLBareValue.isValid(Array(text.utf8)))
    }

    @Test(arguments: [
        "", "tru", "True", "01", "+0x1", "0X1", "0x", "0x_1", "1__0", "1_", "_1", "1.", ".5", "1.e5", "1e", "1e_5",
        "infinity", "1979-5-27", "1979-05-27T", "1979-05-27T7:32:00", "07:32", "07:32:00Z", "1979-05-27T07:32:00+07",
        "1979-05-27Tx07:32:00", "1979-05-27T07:32:00.", "--1", "a", "=",
    ])
    func malformedBareValues(text: String) {
        #expect(!TOMLBareValue.isValid(Array(text.utf8)))
    }

    @Test func arbitraryInputNeverCrashes() {
        // A small deterministic fuzz: mutate a valid file and require parse to
        // either succeed or throw ConfigError.
        let seed = Array((minimal + """
            [keepalive]
            interval = "5s"
            write = "00"
            [reconnect]
            escalate = ["hci-reset"]
            jitter = 0.2
            [readings]
            rotate_size = "64MiB"
            """).utf8)
        let alphabet = Array("[]=\"'.,{}#\n -0123456789abcdefxsmhKiMB\\u".utf8)
        var rng = SplitMix64(seed: 42)
        for _ in 0..<400 {
            var bytes = seed
            for _ in 0..<Int(rng.next() % 6 + 1) {
                let position = Int(rng.next() % UInt64(bytes.count))
                switch rng.next() % 3 {
                case 0: bytes[position] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: bytes.remove(at: position)
                default: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: position)
                }
            }
            _ = try? TetherConfig.parse(String(decoding: bytes, as: UTF8.self), file: file)
        }
    }
}

@Suite("Config file loading")
struct ConfigLoadingTests {
    @Test func missingFileNamesThePath() throws {
        let path = "/nonexistent-\(UUID().uuidString)/tether.toml"
        do {
            _ = try TetherConfig.load(path: path)
            Issue.record("expected an error")
        } catch {
            #expect(error.file == path)
            #expect(error.description.contains(path))
            #expect(error.message.contains("No such file"))
        }
    }

    @Test func loadsAFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tether-\(UUID().uuidString).toml").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(minimal.utf8).write(to: URL(fileURLWithPath: path))
        #expect(try TetherConfig.load(path: path) == TetherConfig.defaults(address: "AA:BB:CC:DD:EE:FF"))
    }

    @Test func directoryAndInvalidUTF8AreErrors() throws {
        let directory = FileManager.default.temporaryDirectory.path
        #expect(throws: ConfigError.self) { try TetherConfig.load(path: directory) }

        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tether-\(UUID().uuidString).toml").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(Array(minimal.utf8) + [0xff, 0xfe, 0x0a]).write(to: URL(fileURLWithPath: path))
        do {
            _ = try TetherConfig.load(path: path)
            Issue.record("expected an error")
        } catch {
            #expect(error.line == 4)
            #expect(error.message.contains("UTF-8"))
        }
    }
}

@Suite("Value syntax")
struct ValueSyntaxTests {
    @Test(arguments: [
        ("250ms", Duration.milliseconds(250)),
        ("5s", .seconds(5)),
        ("1.5s", .milliseconds(1500)),
        ("0.1s", .milliseconds(100)),
        (".5s", .milliseconds(500)),
        ("3m", .seconds(180)),
        ("1h", .seconds(3600)),
        ("0s", .zero),
        ("0", nil),
        ("1m30s", .seconds(90)),
        ("2h 15m", .seconds(8100)),
        ("10us", .microseconds(10)),
        ("7ns", .nanoseconds(7)),
        (" 5s ", .seconds(5)),
        ("5 s", .seconds(5)),
        ("-2s", .seconds(-2)),
        ("5", nil),
        ("s", nil),
        ("", nil),
        ("5 parsecs", nil),
        ("5s5", nil),
        ("1.2.3s", nil),
        ("--5s", nil),
        ("99999999999999999999h", nil),
        ("3000000h", nil),
    ] as [(String, Duration?)])
    func durationParsing(text: String, expected: Duration?) {
        #expect(DurationText.parse(text) == expected)
    }

    @Test(arguments: [
        (Duration.milliseconds(250), "250ms"),
        (.seconds(5), "5s"),
        (.milliseconds(1500), "1.5s"),
        (.seconds(180), "3m"),
        (.seconds(90), "90s"),
        (.seconds(3600), "1h"),
        (.zero, "0s"),
        (.microseconds(10), "10us"),
        (.nanoseconds(1_000_000_001), "1.000000001s"),
        (.seconds(-2), "-2s"),
    ] as [(Duration, String)])
    func durationFormatting(duration: Duration, expected: String) {
        #expect(DurationText.format(duration) == expected)
        #expect(DurationText.parse(expected) == duration)
    }

    @Test(arguments: [
        ("64MiB", Int64(64 << 20)),
        ("1GiB", 1 << 30),
        ("512KiB", 512 << 10),
        ("10MB", 10_000_000),
        ("4096", 4096),
        ("4096B", 4096),
        ("1.5KiB", 1536),
        ("2 tib", 2 << 40),
        ("1kB", 1000),
        ("-1B", nil),
        ("", nil),
        ("MiB", nil),
        ("12 parsecs", nil),
        ("99999999999TiB", nil),
    ] as [(String, Int64?)])
    func byteSizeParsing(text: String, expected: Int64?) {
        #expect(ByteSizeText.parse(text) == expected)
    }

    @Test(arguments: [
        (Int64(64 << 20), "64MiB"),
        (1 << 30, "1GiB"),
        (4096, "4KiB"),
        (10_000_000, "10MB"),
        (4097, "4097B"),
        (0, "0B"),
    ] as [(Int64, String)])
    func byteSizeFormatting(bytes: Int64, expected: String) {
        #expect(ByteSizeText.format(bytes) == expected)
        #expect(ByteSizeText.parse(expected) == bytes)
    }

    @Test(arguments: [
        ("2a19", "00002a19-0000-1000-8000-00805f9b34fb"),
        ("0x2A19", "00002a19-0000-1000-8000-00805f9b34fb"),
        ("0000180F", "0000180f-0000-1000-8000-00805f9b34fb"),
        ("6E400003-B5A3-F393-E0A9-E50E24DCCA9E", ConfigUUID.nusTX),
        ("2a1", nil),
        ("0x", nil),
        ("6e400003b5a3f393e0a9e50e24dcca9e", nil),
        ("6e400003-b5a3-f393-e0a9-e50e24dcca9", nil),
        ("6e40000-3b5a3-f393-e0a9-e50e24dcca9e", nil),
        ("zz19", nil),
        ("2a-9", nil),
    ] as [(String, String?)])
    func uuidNormalization(text: String, expected: String?) {
        #expect(ConfigUUID.normalize(text) == expected)
    }

    @Test func addressNormalization() {
        #expect(BluetoothAddressText.normalize("aa:bb:cc:dd:ee:0f") == "AA:BB:CC:DD:EE:0F")
        #expect(BluetoothAddressText.normalize("aa-bb-cc-dd-ee-0f") == "AA:BB:CC:DD:EE:0F")
        #expect(BluetoothAddressText.normalize("aa:bb:cc:dd:ee") == nil)
        #expect(BluetoothAddressText.normalize("aa:bb:cc:dd:ee:0g") == nil)
        #expect(BluetoothAddressText.normalize("aa:bb-cc:dd:ee:0f") == nil)
    }

    /// Spaces, tabs and line ends around a value are dropped; other
    /// whitespace is not ASCII syntax and stays, to be refused.
    @Test func asciiWhitespaceAroundAValueIsTrimmed() {
        #expect(BluetoothAddressText.normalize(" \taa:bb:cc:dd:ee:0f\r\n ") == "AA:BB:CC:DD:EE:0F")
        #expect(BluetoothAddressText.normalize("\u{00A0}aa:bb:cc:dd:ee:0f") == nil)
        #expect(BluetoothAddressText.normalize("aa:bb:cc:dd:ee:0f\u{2003}") == nil)
        #expect(BluetoothAddressText.normalize("  ") == nil)
        #expect("  é\u{301} x \t".trimmingASCIIWhitespace() == "é\u{301} x")
    }

    @Test func decimalDigitsAreASCIIOnly() {
        #expect(DecimalText.digitValue("7") == 7)
        #expect(DecimalText.digitValue("\u{0667}") == nil)  // ARABIC-INDIC DIGIT SEVEN
        #expect(DecimalText.digitValue("x") == nil)
    }
}

// The fuzz test draws from Pacing's SplitMix64 (the generator every jitter uses).
