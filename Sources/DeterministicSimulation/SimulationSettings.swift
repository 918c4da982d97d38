import LinkPolicy
import LinkSupervisor

/// What one seed simulates: the daemon's settings (drawn from the seed
/// within what the config allows, so that every seed is a configuration a
/// gateway could run) and the dongle's habits.
struct SimulationSettings {
    var supervisor: Supervisor.Settings
    /// The dongle sends a burst of notifications this often while its application runs.
    var burstPeriod: Duration
    var burstSize: ClosedRange<Int>
    /// keepalive.sleep_after: the dongle's idle-sleep deadline.
    var sleepAfter: Duration
    /// readings.flush_interval.
    var flushInterval: Duration
    /// readings.max_backlog.
    var maxBacklog: Int
    /// readings.rotate_size and retain_size (small, so rotation happens in a simulated day).
    var rotateSize: Int64 = 64 << 10
    var retainSize: Int64 = 1 << 40
    /// Mean time between two faults.
    var faultEvery: Duration
    /// The recorder's retry interval while writes fail (ReadingRecorder's).
    var retryInterval: Duration = .seconds(1)

    init(random: inout SimulationRandom) {
        let interval: Duration = random.pick([.seconds(5), .seconds(5), .seconds(10)])
        var policy = ReconnectPolicy()
        policy.windowAttempts = random.pick([5, 8, 12, 12])
        policy.cooldown = random.pick([.seconds(60), .seconds(300), .seconds(300)])
        policy.connectTimeout = random.pick([.seconds(10), .seconds(20), .seconds(20), .seconds(30)])
        var settings = Supervisor.Settings(
            policy: policy, keepaliveInterval: interval, keepaliveTimeout: .seconds(3),
            escalation: random.pick([[], [], [.powerCycle], [.powerCycle, .hciReset]])
        )
        // The config's default: 20 s, or two keep-alive intervals when longer.
        settings.silenceLimit = max(.seconds(20), interval * 2)
        settings.staleDeviceRemoval = random.pick([.unbonded, .unbonded, .never])
        supervisor = settings
        burstPeriod = random.pick([.seconds(6), .seconds(10), .seconds(15)])
        burstSize = 1...2
        sleepAfter = max(.seconds(30), interval * 2)
        flushInterval = .seconds(1)
        maxBacklog = random.pick([40, 100_000])
        faultEvery = random.pick([.seconds(600), .seconds(1200), .seconds(3600)])
        // keepalive.confirm_every: 0 (every poll answered), the default, or
        // longer, so that polls without a reply run between answered ones.
        // Drawn last, so that the draws above stay what they were per seed.
        supervisor.keepaliveConfirmEvery = random.pick([nil, .seconds(5), .seconds(15), .seconds(30)])
    }

    var recoveryBound: Duration {
        supervisor.policy.cooldown + supervisor.policy.window + supervisor.policy.connectTimeout + Invariant.recoverySlack
    }
}
