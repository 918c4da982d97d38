// swift-tools-version:6.0
import PackageDescription

// Layers, lowest first; a target only depends on targets above it in this list.
//   CDBus, CBluetooth, CMosquitto  C shims over libdbus-1, libbluetooth and libmosquitto
//   CSystemd            C shim: datagrams (and fd passing) to Unix sockets, for sd_notify and journald
//   CProcess            C shim: process-wide prctl(2) settings (variadic in C, so not callable from Swift)
//   CClock              C shim: the kernel's NTP status (adjtimex(2); <sys/timex.h> is not in Swift's Glibc)
//   DurationUnits       a Duration in whole milliseconds, microseconds, nanoseconds (saturating) or Double seconds:
//                       the arithmetic poll(2) timeouts, records and metrics need, once: standard library only
//   ChildProcess        posix_spawn with kill/waitpid (dbus-daemon, demo, tests)
//   CEventLoop, EventLoop  one thread, one epoll set: the daemon's executor, descriptors and monotonic timers;
//                       the root task and task sleeps on it, so the daemon needs no libdispatch thread
//                       (or a virtual loop on virtual time, driven by its caller: `make dst`)
//   DBus                a small, general D-Bus binding
//   ControllerDevice    the devices under a controller, through sysfs (Sysfs): the USB device (a port reset,
//                       btusb rebound) and a UART controller's serdev device (its driver rebound): blocking
//   HCI                 raw HCI device control (reset) through libbluetooth; what attaches a controller
//   Rfkill              the kernel's rfkill switches (/dev/rfkill)
//   MQTT                an MQTT connection through libmosquitto, driven by an EventLoop
//   BlueZ               a typed client for org.bluez
//   Hex                 hex text to bytes and back (payloads, config values): standard library only
//   PayloadLayout       the dongle's payload as the config's [decode] declares it, decoded into named
//                       fields as JSON: standard library only
//   TextColumns         fixed-width columns and fixed-point figures without Foundation (the log, the CLI's
//                       tables): standard library only
//   Pacing              one backoff for everything Tether repeats, the generator its jitter draws from (SplitMix64),
//                       durations as logs print them: standard library only
//   LinkPolicy          what an operator decides about the link, as values (ReconnectPolicy, EscalationStep), which
//                       the config produces and the supervisor obeys: standard library only
//   LinkSupervisor      the supervisor state machine: standard library only
//   Configuration       the config file (TOML) and its value types (knows nothing of the supervisor)
//   Readings            the readings log: records, recorder (on an EventLoop thread), reader, follower
//   DurableFile         small files read and replaced whole, atomically and durably (cursor, status, metrics)
//   MetricsTextfile     swift-metrics instruments on a swift-prometheus registry, written for node_exporter
//   Forwarding          `tether forward`: the readings log to MQTT, at least once, from a durable cursor
//   Simulator           a simulated bluetoothd (BlueZ's D-Bus API) for tests, the demo and the soak
//   Systemd             sd_notify and journald's native protocol (a swift-log backend)
//   LinkCore            the link's pure decisions below the supervisor, which ActionLane and `make dst` both run:
//                       what bluetoothd's answer to each call means (BlueZReplies: InProgress that is success,
//                       errors as LinkFailures, who can fix a refusal) and an escalation step's run (EscalationRun)
//   ControlAPI          the control API io.tether.Tether1 that the daemon serves and the CLI calls: its
//                       address (bus name, path, errors), the client, and LinkStatus (the status it publishes)
//   DongleScan          `tether scan`: nearby dongles found through bluetoothd, printed safely (TerminalText)
//   TetherDaemon        adapters: runs the supervisor against BlueZ, records readings, logging, serves the
//                       control API (ControlServer)
//   DeterministicSimulation  the daemon from the bus up (session, link service, recorder, readings log) against the
//                       simulated bluetoothd, on virtual loops through an in-process bus, with a model disk (`make dst`)
//   CommandLineArguments  what the two executables share: argument types (durations), `main` (CommandMain)
//   tether              the command-line front end: the product binary a gateway runs (its version from the
//                       TetherVersion plugin: packaging/version.sh, as the Debian package's)
//   tether-dev          development tools: `simulate`, `demo`, `soak` (not installed; no simulator in tether)
//   tether-dst          the deterministic simulation's runner (not installed; small, so `make dst-selftest`
//                       rebuilds only what it needs for each planted bug)
/// The product's modules see only the members of modules they import
/// themselves: an extension of `Foundation` that a dependency imports
/// (TOMLKit imports `Foundation.Data`) would otherwise be picked over the
/// standard library's and link Foundation and ICU (37 MB) into the binary.
let productSettings: [SwiftSetting] = [.enableUpcomingFeature("MemberImportVisibility")]

let package = Package(
    name: "Tether",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "tether", targets: ["tether"]),
        .executable(name: "tether-dev", targets: ["tether-dev"]),
        .executable(name: "tether-dst", targets: ["tether-dst"]),
        // For the libFuzzer targets in Fuzz/, a separate package that depends on this one.
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "BlueZ", targets: ["BlueZ"]),
        .library(name: "LinkPolicy", targets: ["LinkPolicy"]),
        .library(name: "LinkSupervisor", targets: ["LinkSupervisor"]),
        .library(name: "Configuration", targets: ["Configuration"]),
        .library(name: "Readings", targets: ["Readings"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CBluetooth",
            pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]
        ),
        // libmosquitto's header (libmosquitto-dev), the library itself loaded with dlopen.
        .target(name: "CMosquitto"),
        .target(name: "CSystemd"),
        .target(name: "CProcess"),
        .target(name: "CClock"),
        .target(name: "DurationUnits", swiftSettings: productSettings),
        .target(name: "ChildProcess", dependencies: ["CProcess", "DurationUnits"], swiftSettings: productSettings),
        .target(name: "CEventLoop"),
        .target(name: "EventLoop", dependencies: ["CEventLoop", "DurationUnits"], swiftSettings: productSettings),
        .target(name: "DBus", dependencies: ["CDBus", "CEventLoop", "EventLoop", "ChildProcess"], swiftSettings: productSettings),
        .target(name: "ControllerDevice", swiftSettings: productSettings),
        .target(name: "HCI", dependencies: ["CBluetooth", "ControllerDevice", "DurationUnits"], swiftSettings: productSettings),
        .target(name: "Rfkill", swiftSettings: productSettings),
        .target(name: "BlueZ", dependencies: ["DBus", "EventLoop"], swiftSettings: productSettings),
        .target(name: "MQTT", dependencies: ["CMosquitto", "EventLoop"], swiftSettings: productSettings),
        .target(name: "Hex", swiftSettings: productSettings),
        .target(name: "PayloadLayout", swiftSettings: productSettings),
        .target(name: "TextColumns", swiftSettings: productSettings),
        .target(name: "Pacing", swiftSettings: productSettings),
        .target(name: "LinkPolicy", dependencies: ["Pacing"], swiftSettings: productSettings),
        .target(name: "LinkSupervisor", dependencies: ["LinkPolicy", "Pacing"], swiftSettings: productSettings),
        .target(
            name: "Configuration", dependencies: ["Hex", "LinkPolicy", "Pacing", "PayloadLayout", .product(name: "TOMLKit", package: "TOMLKit")],
            swiftSettings: productSettings),
        .target(name: "Readings", dependencies: ["Hex", "EventLoop", "CClock", "PayloadLayout", "DurationUnits"], swiftSettings: productSettings),
        .target(name: "DurableFile", swiftSettings: productSettings),
        .target(
            name: "MetricsTextfile",
            dependencies: [
                "DurableFile",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: productSettings
        ),
        .target(name: "Simulator", dependencies: ["DBus", "BlueZ", "EventLoop", "Rfkill", "Pacing", "DurationUnits"]),
        .target(
            name: "Forwarding",
            dependencies: [
                "MQTT", "EventLoop", "Readings", "Configuration", "PayloadLayout", "DurableFile", "MetricsTextfile", "Pacing",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: productSettings
        ),
        .target(
            name: "Systemd",
            dependencies: ["CSystemd", "ChildProcess", "EventLoop", .product(name: "Logging", package: "swift-log")], swiftSettings: productSettings
        ),
        .target(
            name: "LinkCore", dependencies: ["DBus", "BlueZ", "LinkPolicy", "LinkSupervisor", "Configuration"],
            swiftSettings: productSettings),
        .target(
            name: "ControlAPI", dependencies: ["DBus", "Configuration", "Pacing", "LinkSupervisor", "DurationUnits"],
            swiftSettings: productSettings),
        .target(
            name: "DongleScan", dependencies: ["BlueZ", "DBus", "Configuration", "LinkCore", "TextColumns"],
            swiftSettings: productSettings),
        .target(
            name: "TetherDaemon",
            dependencies: [
                "DBus", "EventLoop", "BlueZ", "LinkCore", "HCI", "Rfkill", "ControllerDevice", "Pacing", "LinkPolicy", "LinkSupervisor",
                "Configuration", "ControlAPI", "TextColumns",
                "Readings", "Systemd", "MetricsTextfile", "DurableFile", "CClock", "DurationUnits",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: productSettings
        ),
        // Above the daemon: it runs the daemon (its session, link service and recorder) against the
        // simulated bluetoothd, on virtual loops, through an in-process bus.
        .target(
            name: "DeterministicSimulation",
            dependencies: [
                "Pacing", "LinkPolicy", "LinkSupervisor", "BlueZ", "DBus", "EventLoop", "HCI", "Readings", "Configuration",
                "Simulator", "Systemd", "ControlAPI", "TetherDaemon", "DurationUnits", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "CommandLineArguments",
            dependencies: ["Configuration", "EventLoop", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: productSettings
        ),
        .executableTarget(
            name: "tether",
            dependencies: [
                "TetherDaemon", "ControlAPI", "DongleScan", "TextColumns", "LinkSupervisor", "Configuration", "Readings", "PayloadLayout",
                "CommandLineArguments", "DBus", "Forwarding", "EventLoop", "Systemd", "MetricsTextfile", "Rfkill", "CProcess", "ControllerDevice",
                "DurationUnits",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: productSettings,
            plugins: ["TetherVersion"]
        ),
        .plugin(name: "TetherVersion", capability: .buildTool()),
        .executableTarget(
            name: "tether-dev",
            dependencies: [
                "TetherDaemon", "ControlAPI", "Simulator", "LinkSupervisor", "Configuration", "Readings", "CommandLineArguments",
                "Pacing", "DBus", "ChildProcess", "EventLoop", "DurationUnits",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "tether-dst", dependencies: ["DeterministicSimulation", "DurationUnits"]),
        .target(
            name: "TestSupport", dependencies: ["DBus", "CSystemd", "ChildProcess", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport"
        ),
        .testTarget(name: "DurationUnitsTests", dependencies: ["DurationUnits"]),
        .testTarget(name: "EventLoopTests", dependencies: ["EventLoop", "DurationUnits"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "TestSupport"]),
        .testTarget(name: "MQTTTests", dependencies: ["MQTT", "EventLoop", "ChildProcess", "TestSupport"]),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "EventLoop", "Pacing", "TestSupport"]),
        .testTarget(name: "LinkSupervisorTests", dependencies: ["LinkSupervisor", "LinkPolicy", "Pacing"]),
        .testTarget(name: "PacingTests", dependencies: ["Pacing"]),
        .testTarget(name: "DeterministicSimulationTests", dependencies: ["DeterministicSimulation"]),
        .testTarget(name: "HCITests", dependencies: ["HCI", "TestSupport"]),
        .testTarget(name: "RfkillTests", dependencies: ["Rfkill"]),
        .testTarget(name: "ControllerDeviceTests", dependencies: ["ControllerDevice", "TestSupport"]),
        .testTarget(name: "ConfigurationTests", dependencies: ["Configuration", "LinkPolicy", "Pacing", "PayloadLayout", "TestSupport"]),
        .testTarget(name: "LinkCoreTests", dependencies: ["LinkCore", "BlueZ", "DBus", "Configuration", "LinkPolicy", "LinkSupervisor"]),
        .testTarget(name: "TetherDaemonTests", dependencies: ["TetherDaemon", "Configuration", "LinkSupervisor", "LinkPolicy", "HCI", "BlueZ", "DBus", "EventLoop"]),
        // Pacing for its SplitMix64 (a seeded generator), Configuration for the Nordic UUIDs, EventLoop for a
        // recorder on a virtual loop.
        .testTarget(name: "ReadingsTests", dependencies: ["Readings", "EventLoop", "Pacing", "Configuration", "PayloadLayout"]),
        .testTarget(name: "SystemdTests", dependencies: ["Systemd", "TestSupport"]),
        .testTarget(name: "PackagingTests", dependencies: ["TestSupport", "ChildProcess"]),
        .testTarget(
            name: "MetricsTests",
            dependencies: [
                "MetricsTextfile", "TetherDaemon", "Forwarding", "LinkSupervisor", "Readings", "TestSupport", "ChildProcess",
                .product(name: "Logging", package: "swift-log"),
            ],
            // promtool reads the rule tests from the source tree (they name config/tether-alerts.yml).
            exclude: ["Resources"]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "TetherDaemon", "ControlAPI", "DongleScan", "LinkSupervisor", "Configuration", "Readings", "Simulator", "BlueZ",
                "DBus", "Systemd", "TestSupport", "Forwarding", "MQTT", "EventLoop", "MetricsTextfile", "HCI", "Rfkill",
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
