import Configuration
import DurationUnits
import LinkPolicy
import Simulator

/// What one seed simulates: a config a gateway could run (drawn from the
/// seed within what the config allows, then written as `tether.toml` text and
/// read by the daemon's own parser) and the place it runs in (the dongle's
/// habits, the other advertisers, an identical dongle of another vehicle).
///
/// The draws are made in a fixed order, so a seed's settings never depend on
/// anything but the seed.
struct SimulationSettings {
    /// keepalive.interval, timeout, sleep_after and confirm_every.
    var keepaliveInterval: Duration
    var keepaliveTimeout: Duration = .seconds(3)
    var sleepAfter: Duration
    var confirmEvery: Duration?
    /// dongle.silence_limit (the config's default: 20 s, or two keep-alive intervals when longer).
    var silenceLimit: Duration
    /// [reconnect]
    var windowAttempts: Int
    /// reconnect.initial_backoff and max_backoff: the config's defaults, or
    /// short ones (make e2e's) whose window can run out within the 5 s a
    /// controller check of a wedged controller takes.
    var initialBackoff: Duration
    var maxBackoff: Duration
    var window: Duration = .seconds(180)
    var cooldown: Duration
    var connectTimeout: Duration
    var escalate: [EscalationStep]
    var removeStaleDevice: StaleDeviceRemoval
    var scanStallAfter: Duration = .seconds(120)
    /// [readings]
    var flushInterval: Duration = .seconds(1)
    var maxBacklog: Int
    var rotateSize = "64KiB"
    /// Found by `name_prefix` (a fleet's config, bound on the first link)
    /// rather than by address; then an identical dongle of another vehicle
    /// is sometimes nearby (`twin`).
    var findsByName: Bool
    var twin: Bool
    /// Other devices advertising around the gateway at the start.
    var otherAdvertisers: Int
    /// Notifications per second while the dongle's application runs.
    var notifyRate: Double
    /// Mean time between two faults.
    var faultEvery: Duration
    /// The daemon may send HCI commands (CAP_NET_ADMIN, a kernel with raw
    /// HCI sockets): the controller check and an HCI reset work. Without,
    /// a wedged controller is found only by failed attempts, and a power
    /// cycle is tried on it.
    var controllerCommandsPermitted: Bool

    static let dongleAddress = "AA:BB:CC:DD:EE:FF"
    static let twinAddress = "AA:BB:CC:DD:EE:F1"
    static let adapterAddress = "00:1A:7D:DA:71:13"
    /// How often each other advertiser is reported while discovery runs.
    static let otherAdvertisingInterval: Duration = .seconds(5)
    static let dongleName = "Tether-Dongle"

    init(random: inout SimulationRandom) {
        keepaliveInterval = random.pick([.seconds(5), .seconds(5), .seconds(10)])
        windowAttempts = random.pick([3, 5, 8, 12])
        cooldown = random.pick([.seconds(60), .seconds(300), .seconds(300)])
        connectTimeout = random.pick([.seconds(10), .seconds(20), .seconds(20), .seconds(30)])
        escalate = random.pick([[], [], [.powerCycle], [.powerCycle, .hciReset]])
        silenceLimit = max(.seconds(20), keepaliveInterval * 2)
        removeStaleDevice = random.pick([.unbonded, .unbonded, .never])
        notifyRate = random.pick([0.1, 0.15, 0.25])
        sleepAfter = max(.seconds(30), keepaliveInterval * 2)
        maxBacklog = random.pick([40, 100_000])
        faultEvery = random.pick([.seconds(600), .seconds(1200), .seconds(3600)])
        confirmEvery = random.pick([nil, .seconds(5), .seconds(15), .seconds(30)])
        findsByName = random.chance(0.25)
        twin = findsByName && random.chance(0.5)
        otherAdvertisers = random.pick([0, 0, 3, 20])
        controllerCommandsPermitted = random.chance(0.75)
        (initialBackoff, maxBackoff) = random.pick([(.seconds(1), .seconds(30)), (.seconds(1), .seconds(30)), (.milliseconds(500), .seconds(4))])
    }

    /// `tether.toml` for this seed, its readings (and binding) in `directory`.
    func configText(directory: String) -> String {
        func seconds(_ duration: Duration) -> String { "\"\(duration.wholeMilliseconds)ms\"" }
        let finds = findsByName
            ? "name_prefix = \"\(Self.dongleName.prefix(7))\""
            : "address = \"\(Self.dongleAddress)\""
        return """
            [dongle]
            \(finds)
            notify = ["6e400003-b5a3-f393-e0a9-e50e24dcca9e"]
            silence_limit = \(seconds(silenceLimit))
            [keepalive]
            interval = \(seconds(keepaliveInterval))
            characteristic = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
            write = "00"
            write_type = "command"
            timeout = \(seconds(keepaliveTimeout))
            sleep_after = \(seconds(sleepAfter))
            confirm_every = \(confirmEvery.map(seconds) ?? "\"0s\"")
            [reconnect]
            window_attempts = \(windowAttempts)
            initial_backoff = \(seconds(initialBackoff))
            max_backoff = \(seconds(maxBackoff))
            window = \(seconds(window))
            cooldown = \(seconds(cooldown))
            connect_timeout = \(seconds(connectTimeout))
            escalate = [\(escalate.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))]
            remove_stale_device = "\(removeStaleDevice.rawValue)"
            scan_stall_after = \(seconds(scanStallAfter))
            [readings]
            directory = "\(directory)"
            flush_interval = \(seconds(flushInterval))
            rotate_size = "\(rotateSize)"
            max_backlog = \(maxBacklog)

            """
    }

    /// The simulated bluetoothd and dongle for this seed.
    var simulatorOptions: SimulatorOptions {
        var options = SimulatorOptions()
        options.address = Self.dongleAddress
        options.name = Self.dongleName
        options.adapterAddress = Self.adapterAddress
        options.sleepAfter = sleepAfter
        // A parked vehicle's dongle is woken by its ignition, which the
        // faults model (`dongle-away`); left advertising, it would power off
        // after 180 s and never come back, which no Tether can help.
        options.advertiseTimeout = .seconds(100 * 86400)
        options.notifyRate = notifyRate
        // Once a second (Nordic's connectable advertising runs from 20 ms to
        // 10 s; bluetoothd reports each): ten times fewer messages than the
        // simulator's default 100 ms while discovery runs, which is much of
        // a parked vehicle's simulated life.
        options.advertisingInterval = .seconds(1)
        options.otherAdvertisers = otherAdvertisers
        options.otherAdvertisingInterval = Self.otherAdvertisingInterval
        options.twinAddress = twin ? Self.twinAddress : nil
        // Longer than bluetoothd's real ~2 s would only slow the seeds.
        options.disconnectDelay = .milliseconds(500)
        options.keepsEventsInMemory = false
        return options
    }

    /// How long after the last fault cleared Tether must be online.
    var recoveryBound: Duration {
        cooldown + window + connectTimeout + Invariant.recoverySlack
    }
}
