import DeterministicSimulation
import Dispatch
import DurationUnits
import Foundation
import Synchronization

// `make dst`: many seeds, a summary, exit 1 on the first violation.
// `make dst DST_SEED=S`: one seed's trace, byte for byte the same on every run.
// Settings come from the environment (the Makefile passes them through):
//   DST_SEED=S      replay seed S, printing its trace (DST_TRACE=full: polls and readings too)
//   DST_SEEDS=N     run seeds DST_FIRST_SEED … DST_FIRST_SEED+N−1 (default 200, from 1)
//   DST_DAYS=D      simulated days per seed (default 2)
//   DST_JOBS=J      seeds run side by side, each on one thread (default 2)

// Swift seeds its hashing per process, so a dictionary's or a set's order
// (the bus's handlers for one signal, the simulator's sessions) would differ
// between two runs of one seed; with SWIFT_DETERMINISTIC_HASHING set it
// does not. The runtime reads it at start: set it and start again.
if ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] == nil {
    setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
    var argv = CommandLine.arguments.map { strdup($0) } + [nil]
    execv("/proc/self/exe", &argv)
    FileHandle.standardError.write(Data("tether-dst: cannot start again with SWIFT_DETERMINISTIC_HASHING=1: \(String(cString: strerror(errno)))\n".utf8))
    exit(2)
}

let environment = ProcessInfo.processInfo.environment
func setting(_ name: String, _ fallback: UInt64) -> UInt64 {
    guard let text = environment[name] else { return fallback }
    guard let value = UInt64(text) else {
        FileHandle.standardError.write(Data("tether-dst: \(name)=\(text) is not a whole number\n".utf8))
        exit(2)
    }
    return value
}

let days = setting("DST_DAYS", 2)
let duration = Duration.seconds(Int64(days) * 86400)
let scratch = DeterministicSimulation.scratchDirectory()

func printViolation(_ result: SeedResult) {
    guard let violation = result.violation else { return }
    print("VIOLATION seed=\(result.seed) invariant=\(violation.invariant.rawValue) at \(violation.at.simulationStamp)")
    print("  \(violation.detail)")
    print("  replay: make dst DST_SEED=\(result.seed)\(days == 2 ? "" : " DST_DAYS=\(days)")")
    print("  last events before the violation:")
    for line in result.lastLines { print("    \(line)") }
}

if environment["DST_SEED"] != nil {
    let seed = setting("DST_SEED", 1)
    let result = DeterministicSimulation.run(
        seed: seed, duration: duration, directory: scratch + "/seed-\(seed)", trace: { print($0) },
        fullTrace: environment["DST_TRACE"] == "full"
    )
    var summary = SimulationSummary()
    summary.add(result)
    print("---")
    summary.lines.forEach { print($0) }
    if environment["DST_KEEP_LOGS"] == nil { try? FileManager.default.removeItem(atPath: scratch) }
    if result.violation != nil {
        printViolation(result)
        exit(1)
    }
    exit(0)
}

let first = setting("DST_FIRST_SEED", 1)
let count = Int(setting("DST_SEEDS", 200))
let jobs = max(1, min(Int(setting("DST_JOBS", 2)), 64))
let started = ContinuousClock.now

/// Seeds are handed out in order; after a failure no new seed starts, and
/// the lowest failing seed is reported (the same one on every run).
struct Progress {
    var next = 0
    var results: [SeedResult?]
    var failed = false
}
let progress = Mutex(Progress(results: Array(repeating: nil, count: count)))

DispatchQueue.concurrentPerform(iterations: jobs) { _ in
    while true {
        let index: Int? = progress.withLock { state in
            guard !state.failed, state.next < count else { return nil }
            state.next += 1
            return state.next - 1
        }
        guard let index else { return }
        let seed = first + UInt64(index)
        let result = DeterministicSimulation.run(seed: seed, duration: duration, directory: scratch + "/seed-\(seed)")
        progress.withLock { state in
            state.results[index] = result
            if result.violation != nil { state.failed = true }
        }
    }
}
try? FileManager.default.removeItem(atPath: scratch)

let elapsed = started.duration(to: .now)
let results = progress.withLock { $0.results }.compactMap { $0 }
var summary = SimulationSummary()
results.forEach { summary.add($0) }
print("deterministic simulation: seeds \(first)…\(first + UInt64(count) - 1), \(days) simulated days each, \(jobs) at a time")
summary.lines.forEach { print($0) }
let wallSeconds = elapsed.inSeconds
let simulatedSeconds = Double(summary.simulated.components.seconds)
print(String(
    format: "wall time: %.1f s; simulated time per wall second: %.0f s (%.1f days); seeds per minute: %.0f",
    wallSeconds, simulatedSeconds / wallSeconds, simulatedSeconds / wallSeconds / 86400, Double(summary.seeds) / wallSeconds * 60
))
if let failure = results.filter({ $0.violation != nil }).min(by: { $0.seed < $1.seed }) {
    printViolation(failure)
    exit(1)
}
print("every invariant held")
