/// The generator every random choice in Tether draws from (the jitter of
/// its backoffs; the simulator's, the soak's and the deterministic
/// simulation's choices): SplitMix64, small and fixed, so that a seed
/// replays exactly, in tests and in a simulated year alike. Not for secrets.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    /// Seeded from the system's generator: for a daemon whose choices need
    /// not replay (each gateway's jitter its own).
    public static func seededBySystem() -> SplitMix64 {
        var system = SystemRandomNumberGenerator()
        return SplitMix64(seed: system.next())
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in [0, 1).
    public mutating func nextUnit() -> Double {
        Double(next() >> 11) / Double(1 << 53)
    }
}
