import DBus
import Foundation
import Simulator

/// The knobs and properties of a `tether-dev simulate` process, over its
/// control interface on the bus (io.tether.Simulator1): used by the demo and
/// the soak, which run the simulator as a child process.
struct SimulatorRemote: Sendable {
    let bus: Bus

    func knob(_ method: String, _ arguments: [DBusValue] = []) async throws {
        _ = try await bus.call(
            destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
            method: method, arguments
        )
    }

    /// The dongle's state: advertising, connected or asleep.
    func state() async throws -> String {
        try await property("State").string ?? "?"
    }

    /// The last notification sequence number the dongle sent.
    func sequence() async throws -> UInt64 {
        try await property("Sequence").uint64 ?? 0
    }

    func isUp() async -> Bool {
        (try? await bus.nameOwner(of: SimulatorControl.busName)) != nil
    }

    private func property(_ name: String) async throws -> DBusValue {
        try await bus.getProperty(
            destination: SimulatorControl.busName, path: SimulatorControl.path, interface: SimulatorControl.interface,
            name: name
        )
    }

    /// The path of the running `tether-dev` binary, to start `tether-dev simulate`.
    static func selfPath() throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }

    /// The `tether` binary in the same directory as the running `tether-dev`
    /// (as `swift build` leaves them), to start `tether run`.
    static func tetherPath() throws -> String {
        let path = URL(fileURLWithPath: try selfPath()).deletingLastPathComponent().appendingPathComponent("tether").path
        guard FileManager.default.isExecutableFile(atPath: path) else { throw MissingTether(path: path) }
        return path
    }

    /// Notification sequence numbers in readings records (the dongle's first
    /// four payload bytes, little-endian).
    static func sequences(in records: [ReadingRecordLike]) -> [UInt32] {
        records.compactMap { record in
            guard record.source == "notify", let payload = record.payload, payload.count >= 4 else { return nil }
            return payload.prefix(4).enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
        }
    }
}

/// No `tether` binary next to `tether-dev`.
struct MissingTether: Error, CustomStringConvertible {
    let path: String
    var description: String { "no tether binary at \(path), next to tether-dev (build both: swift build)" }
}

/// What `sequences(in:)` reads of a record.
protocol ReadingRecordLike {
    var source: String { get }
    var payload: [UInt8]? { get }
}
