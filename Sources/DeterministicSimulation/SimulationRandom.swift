import DurationUnits
import Pacing

/// The simulation's one source of choices, seeded: every fault, its timing
/// and its duration, every reply's latency and outcome comes from here, so a
/// seed replays exactly. SplitMix64 (Pacing's, the one Tether's jitter draws from): fixed
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
        let low = range.lowerBound.wholeMilliseconds, high = range.upperBound.wholeMilliseconds
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
        let value = (halvings * 0.693_147_180_559_945_3 + minusLn) * Double(mean.wholeMilliseconds)
        return .milliseconds(Int64(value.rounded()))
    }

    mutating func pick<T>(_ choices: [T]) -> T {
        choices[int(0...(choices.count - 1))]
    }
}
