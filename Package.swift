// swift-tools-version:6.0
import PackageDescription

// Layers, lowest first; a target only depends on targets above it in this list.
//   CDBus, CBluetooth   C shims over libdbus-1 and libbluetooth
//   CSystemd            C shim: datagrams (and fd passing) to Unix sockets, for sd_notify and journald
//   ChildProcess        posix_spawn with kill/waitpid (dbus-daemon, demo, tests)
//   CEventLoop, EventLoop  one thread, one epoll set: the daemon's executor, descriptors and monotonic timers
//   DBus                a small, general D-Bus binding
//   HCI                 raw HCI device control (reset) through libbluetooth
//   BlueZ               a typed client for org.bluez
//   TetherCore          pure logic: config, retry policy, supervisor state machine, readings log
//   Simulator           a simulated bluetoothd (BlueZ's D-Bus API) for tests and the demo
//   Systemd             sd_notify and journald's native protocol (a swift-log backend)
//   TetherDaemon        adapters: runs the supervisor against BlueZ, records readings, logging
//   tether              the command-line front end
let package = Package(
    name: "Tether",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "tether", targets: ["tether"]),
        // For the libFuzzer targets in Fuzz/, a separate package that depends on this one.
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "BlueZ", targets: ["BlueZ"]),
        .library(name: "TetherCore", targets: ["TetherCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
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
        .target(name: "CSystemd"),
        .target(name: "ChildProcess"),
        .target(name: "CEventLoop"),
        .target(name: "EventLoop", dependencies: ["CEventLoop"]),
        .target(name: "DBus", dependencies: ["CDBus", "CEventLoop", "EventLoop", "ChildProcess"]),
        .target(name: "HCI", dependencies: ["CBluetooth"]),
        .target(name: "BlueZ", dependencies: ["DBus", "EventLoop"]),
        .target(
            name: "TetherCore",
            dependencies: [
                .product(name: "TOMLKit", package: "TOMLKit"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "Simulator", dependencies: ["DBus", "BlueZ"]),
        .target(
            name: "Systemd",
            dependencies: ["CSystemd", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "TetherDaemon",
            dependencies: [
                "DBus", "EventLoop", "BlueZ", "HCI", "TetherCore", "Systemd",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "tether",
            dependencies: [
                "TetherDaemon", "Simulator", "TetherCore", "DBus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "TestSupport", dependencies: ["DBus", "CSystemd"], path: "Tests/TestSupport"),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "TestSupport"]),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "TestSupport"]),
        .testTarget(name: "TetherCoreTests", dependencies: ["TetherCore"]),
        .testTarget(name: "SystemdTests", dependencies: ["Systemd", "TestSupport"]),
        .testTarget(name: "PackagingTests", dependencies: ["TestSupport", "ChildProcess"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["TetherDaemon", "TetherCore", "Simulator", "BlueZ", "DBus", "Systemd", "TestSupport"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
