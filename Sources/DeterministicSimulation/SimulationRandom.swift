import LinkSupervisor
import Pacing

/// The simulation's one source of choices, seeded: every fault, its timing
/// and its duration, every reply's latency and outcome comes from here, so a
/// seed replays exactly. SplitMix64 (the supervisor's own generator): fixed
/// arithmetic, the same on every run and machine.
struct SimulationRandom {
    private var generator: SplitMix64

    init(seed: UInt64) { generator = SplitMix64(seed: seed) }

    mutating func next() -> UInt64 { generator.next() }

    /// A value in [0, 1).
    mutating func unit() -> Double { generator.nextUnit() }

    /// A value in `range` (the tiny modulo bias does not matter here).
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.upperBound - range.lowerBound + 1))
    }

    mutating func chance(_ probability: Double) -> Bool { unit() < probability }

    /// A duration in `range`, to the millisecond.
    mutating func duration(_ range: ClosedRange<Duration>) -> Duration {
        let low = range.lowerBound.milliseconds, high = range.upperBound.milliseconds
        return .milliseconds(low + Int64(next() % UInt64(high - low + 1)))
    }

    /// Exponentially distributed (a Poisson process's gaps), to the millisecond,
    /// without floating-point logarithms (whose last bits could differ between
    /// libms): the number of halvings of a uniform value, refined linearly.
    mutating func exponential(mean: Duration) -> Duration {
        // −ln(u) = ln 2 · (number of leading halvings) + −ln(fraction), fraction in [1/2, 1).
        var u = unit()
        if u == 0 { u = 0x1p-53 }
        var halvings = 0.0
        while u < 0.5 { u *= 2; halvings += 1 }
        // −ln(x) for x in [1/2, 1): a rational approximation good to ~1e-3.
        let t = (1 - u) / (1 + u)
        let minusLn = 2 * (t + t * t * t / 3 + t * t * t * t * t / 5)
        let value = (halvings * 0.693_147_180_559_945_3 + minusLn) * Double(mean.milliseconds)
        return .milliseconds(Int64(value.rounded()))
    }

    mutating func pick<T>(_ choices: [T]) -> T {
        choices[int(0...(choices.count - 1))]
    }
}

extension Duration {
    /// Whole milliseconds (the simulation's resolution).
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// `d+hh:mm:ss.mmm`, for traces: fixed width, no locale, no wall clock.
    public var simulationStamp: String {
        let ms = milliseconds
        let days = ms / 86_400_000
        let rest = ms % 86_400_000
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(days)+\(pad(rest / 3_600_000, 2)):\(pad(rest / 60000 % 60, 2)):\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))"
    }
}
