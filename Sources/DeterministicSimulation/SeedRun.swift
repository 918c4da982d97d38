import DurationUnits
import Foundation

/// What one seed did: the figures for the summary and, if it failed, the
/// violation with the trace's last lines.
public struct SeedResult: Sendable {
    public var seed: UInt64
    public var simulated: Duration
    /// Faults injected, by `FaultKind` in declaration order.
    public var faults: [Int]
    /// Checks made, by `Invariant` in declaration order.
    public var checks: [Int]
    public var readings: UInt64
    /// The longest time from "every fault cleared" to online.
    public var longestRecovery: Duration
    public var violation: Violation?
    public var lastLines: [String]
}

public enum DeterministicSimulation {
    /// Runs one seed for `duration` of simulated time, its readings log in
    /// `directory` (created and removed; a tmpfs is best). `trace`, when
    /// given, receives every line of the trace as it happens (routine ones
    /// too with `fullTrace`).
    public static func run(
        seed: UInt64, duration: Duration, directory: String, trace: ((String) -> Void)? = nil, fullTrace: Bool = false
    ) -> SeedResult {
        let simulation: Simulation
        do {
            simulation = try Simulation(seed: seed, duration: duration, directory: directory)
        } catch {
            // The seed's config is the simulation's own: one the parser refuses is its bug.
            return SeedResult(
                seed: seed, simulated: .zero, faults: [], checks: [], readings: 0, longestRecovery: .zero,
                violation: Violation(invariant: .simulationSetUp, at: .zero, detail: "the seed's config: \(error)"),
                lastLines: [])
        }
        simulation.trace.sink = trace
        simulation.trace.includeRoutine = fullTrace
        let violation = simulation.run()
        return SeedResult(
            seed: seed, simulated: simulation.now, faults: simulation.faultCounts, checks: simulation.checker.checks,
            readings: simulation.delivered, longestRecovery: simulation.longestRecovery, violation: violation,
            lastLines: simulation.trace.lastLines
        )
    }

    /// The faults' and invariants' names, in the order of `SeedResult`'s arrays.
    public static let faultNames = FaultKind.allCases.map(\.rawValue)
    public static let invariantNames = Invariant.allCases.map(\.rawValue)
    public static let invariantStatements = Invariant.allCases.map { ($0.rawValue, $0.statement) }

    /// A directory for the seeds' logs: on /dev/shm when it is there (no disk I/O), else the temporary directory.
    public static func scratchDirectory() -> String {
        let base = FileManager.default.isWritableFile(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        return base + "/tether-dst-\(ProcessInfo.processInfo.processIdentifier)"
    }
}

/// Sums of many seeds' results.
public struct SimulationSummary: Sendable {
    public var seeds = 0
    public var simulated: Duration = .zero
    public var faults = [Int](repeating: 0, count: FaultKind.allCases.count)
    public var checks = [Int](repeating: 0, count: Invariant.allCases.count)
    public var readings: UInt64 = 0
    public var longestRecovery: Duration = .zero
    /// The seed of `longestRecovery`, to replay it.
    public var longestRecoverySeed: UInt64?

    public init() {}

    public mutating func add(_ result: SeedResult) {
        seeds += 1
        simulated += result.simulated
        for index in faults.indices { faults[index] += result.faults[index] }
        for index in checks.indices { checks[index] += result.checks[index] }
        readings += result.readings
        if result.longestRecovery > longestRecovery {
            longestRecovery = result.longestRecovery
            longestRecoverySeed = result.seed
        }
    }

    /// The summary as text; no wall-clock figure (those are the caller's).
    public var lines: [String] {
        let days = simulated.wholeMilliseconds / 86_400_000
        var lines = [
            "seeds run: \(seeds)",
            "simulated time: \(simulated.simulationStamp) (\(days) days, \(String(format: "%.2f", Double(days) / 365.25)) years)",
            "readings delivered and checked: \(readings)",
            "longest recovery after the last fault cleared: \(longestRecovery.simulationStamp)"
                + (longestRecoverySeed.map { " (seed \($0))" } ?? ""),
            "faults injected: \(faults.reduce(0, +))",
        ]
        for (name, count) in zip(DeterministicSimulation.faultNames, faults) { lines.append("  \(name): \(count)") }
        lines.append("invariant checks made: \(checks.reduce(0, +))")
        for (name, count) in zip(DeterministicSimulation.invariantNames, checks) { lines.append("  \(name): \(count)") }
        return lines
    }
}
