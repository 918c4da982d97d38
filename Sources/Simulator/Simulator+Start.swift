import DBus
import EventLoop

/// Starting and stopping the simulator: its loops and its two connections.
extension Simulator {
    /// Starts the simulator on the bus at `busAddress`, in real time; returns
    /// once `org.bluez` (with the adapter and, if known, the device) and
    /// `io.tether.Simulator` are on the bus. The actor and its control
    /// connection run on the process's simulator thread
    /// (`SimulatorLoops.realTime`), bluetoothd on a thread of its own that
    /// `stop()` ends.
    public static func start(busAddress: String, options: SimulatorOptions = SimulatorOptions()) async throws
        -> Simulator
    {
        let bluetoothd = EventLoop(name: "simulated-bluetoothd")
        let loops = SimulatorLoops(simulator: SimulatorLoops.realTime, bluetoothd: bluetoothd)
        let connect: @Sendable (EventLoop) async throws(DBusError) -> Bus = { loop async throws(DBusError) in
            try await Bus.connect(address: busAddress, on: loop)
        }
        return try await start(connect: connect, loops: loops, ownsBluezLoop: true, options: options)
    }

    /// Starts the simulator on the loops given, its connections made by
    /// `connect` (a `Bus` on the loop it is given: `Bus.connect(address:on:)`,
    /// or a simulation's in-process bus); returns once `org.bluez` and
    /// `io.tether.Simulator` are on the bus. The loops are the caller's: the
    /// simulator never stops them. On virtual loops, call it from a task
    /// that prefers one of them, and drive them until it returns.
    public static func start(
        connect: @escaping @Sendable (EventLoop) async throws(DBusError) -> Bus, loops: SimulatorLoops,
        options: SimulatorOptions = SimulatorOptions()
    ) async throws -> Simulator {
        try await start(connect: connect, loops: loops, ownsBluezLoop: false, options: options)
    }

    private static func start(
        connect: @escaping @Sendable (EventLoop) async throws(DBusError) -> Bus, loops: SimulatorLoops, ownsBluezLoop: Bool,
        options: SimulatorOptions
    ) async throws -> Simulator {
        let simulator: Simulator
        do {
            simulator = try Simulator(connect: connect, loops: loops, ownsBluezLoop: ownsBluezLoop, options: options)
        } catch {
            if ownsBluezLoop { loops.bluetoothd.stop() }
            throw error
        }
        do {
            try await simulator.launch()
        } catch {
            await simulator.stop()
            throw error
        }
        return simulator
    }

    private func launch() async throws {
        let control = try await connect(loop)
        self.control = control
        publishedState = dongle.state
        publishedConnects = dongle.connects
        try await control.export(SimulatorControl.path, [ControlInterface.interface(controlSnapshot, simulator: self)])
        try await control.requestName(SimulatorControl.busName)
        try startRfkill(loop: control.loop)
        try await bringUpBluetoothd()
        enterAdvertising()
    }

    /// Closes both connections and cancels every timer and pending call.
    public func stop() async {
        guard !stopped else { return }
        stopped = true
        rfkillServer?.stop()
        rfkillServer = nil
        for task in [resolveTask, telemetryTask, idleTask, advertisingTask, scanTask, clientWatchTask, restartTask, rfkillWrites] {
            task?.cancel()
        }
        resolveTask = nil
        telemetryTask = nil
        idleTask = nil
        advertisingTask = nil
        scanTask = nil
        clientWatchTask = nil
        restartTask = nil
        rfkillWrites = nil
        for (_, wait) in waits { wait.cancel() }
        waits.removeAll()
        pendingConnect = nil
        abortAgentRequest(reason: "stopped", tellAgent: false)
        releaseAllAcquisitions(reason: "stopped")
        releasedToAnnounce.removeAll()
        resumeServicesResolvedWaiters(false)
        let buses = [bluez, control]
        bluez = nil
        control = nil
        for bus in buses { await bus?.close() }
        if ownsBluezLoop { bluezLoop.stop() }
        log.close()
    }
}
