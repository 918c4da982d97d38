import EventLoop

/// The loops a `Simulator` runs on, given by whoever starts it
/// (`Simulator.start(connect:loops:options:)`): real loops (threads), or
/// virtual ones that a deterministic simulation drives on virtual time.
///
/// Invariant: `bluetoothd` is not `simulator`, so that a hung bluetoothd
/// (`hang(for:)`) holds its own connection and nothing else: the control
/// connection still answers and the simulated dongle's clock runs on.
public struct SimulatorLoops: Sendable {
    /// The loop the `Simulator` actor runs on (its executor): its state, its
    /// timers and tasks (the dongle's idle and advertising clocks, the
    /// telemetry, bluetoothd's restarts), the time it reads (`now`), and
    /// its control connection (`io.tether.Simulator`).
    public let simulator: EventLoop
    /// bluetoothd's main loop: every incarnation's `org.bluez` connection,
    /// and only that.
    public let bluetoothd: EventLoop
    /// Hangs bluetoothd's loop for a duration (`hang(for:)`), from now.
    /// Nil: a closure submitted to `bluetoothd` blocks its thread
    /// (`nanosleep`), which only a real loop has. A simulation on virtual
    /// loops passes a hook that freezes the loop instead
    /// (`VirtualLoops.freeze(loop, until: loop.now + duration)`): blocking
    /// the driving thread would stop every loop and move no virtual time.
    public let freeze: (@Sendable (EventLoop, Duration) -> Void)?

    /// - Precondition: `bluetoothd` is not `simulator`; a virtual
    ///   `bluetoothd` comes with a `freeze` hook.
    public init(simulator: EventLoop, bluetoothd: EventLoop, freeze: (@Sendable (EventLoop, Duration) -> Void)? = nil) {
        precondition(simulator !== bluetoothd, "bluetoothd needs a loop of its own, or a hang would hold the simulator")
        precondition(freeze != nil || !bluetoothd.isVirtual, "a virtual bluetoothd loop hangs only through a freeze hook")
        self.simulator = simulator
        self.bluetoothd = bluetoothd
        self.freeze = freeze
    }

    /// The loop every simulator started with `start(busAddress:options:)`
    /// runs on, with its control connection: one thread for the process,
    /// never stopped, so that a stopped simulator still answers its
    /// observers (`events`, `state`) and a second `stop()`.
    static let realTime = EventLoop(name: "simulator")
}
