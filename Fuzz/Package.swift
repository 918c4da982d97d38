// swift-tools-version:6.0
import PackageDescription

// libFuzzer targets for Tether (`make fuzz`, see README.md here). A package of
// its own so that `swift build` of Tether never sees them: they only link with
// -sanitize=fuzzer, which brings libFuzzer. Fuzz/run.sh builds them with
//   swift build --package-path Fuzz --scratch-path .build-fuzz -c release \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -use-ld=lld \
//     -Xcc -fsanitize=fuzzer-no-link,address -Xcxx -fsanitize=fuzzer-no-link,address
// The flags reach Tether's modules (and toml++ inside TOMLKit) too, so coverage
// guides the fuzzer through them. The harnesses use public API only.
let package = Package(
    name: "TetherFuzz",
    dependencies: [.package(name: "Tether", path: "..")],
    targets: [
        .target(name: "CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"]),
        .target(name: "FuzzDBusValues", dependencies: ["FuzzSupport", .product(name: "DBus", package: "Tether")]),
        .executableTarget(
            name: "FuzzDBusMessage",
            dependencies: ["FuzzSupport", "FuzzDBusValues", .product(name: "DBus", package: "Tether")]
        ),
        .executableTarget(
            name: "FuzzBlueZ",
            dependencies: [
                "FuzzSupport", "FuzzDBusValues",
                .product(name: "DBus", package: "Tether"), .product(name: "BlueZ", package: "Tether"),
            ]
        ),
        .executableTarget(
            name: "FuzzConfig",
            dependencies: [
                "FuzzSupport",
                .product(name: "Configuration", package: "Tether"), .product(name: "LinkPolicy", package: "Tether"),
            ]
        ),
        .executableTarget(
            name: "FuzzReadingLog",
            dependencies: ["FuzzSupport", .product(name: "Readings", package: "Tether")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
