import BlueZ
import DBus
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// bluetoothd coming up, crashing and restarting.
extension Simulator {
    /// A new bluetoothd: a new connection (new unique name) takes org.bluez,
    /// then exports the adapter and, if remembered, the (disconnected) device,
    /// each announced with InterfacesAdded as the real daemon does once it has
    /// read the controller.
    func bringUpBluetoothd() async throws {
        let bus = try await connect(bluezLoop)
        guard !stopped, bluez == nil else {
            await bus.close()
            return
        }
        bluez = bus
        do {
            // bluetoothd serves every call it gets; what bounds a caller is
            // dbus-daemon's max_replies_per_connection (128 by default).
            // Calls a locked-up controller leaves hanging pile up to that,
            // not to the 4 a daemon's control API allows.
            await bus.limitCallsInFlight(perCaller: 128)
            await bus.enableObjectManager(at: .root)
            try await watchClients(on: bus)
            try await bus.requestName(BlueZ.service)
            // src/agent.c's AgentManager1, there before any adapter.
            try await bus.export(AgentManagerObject.path, [AgentManagerObject.interface(simulator: self)])
            guard adapterPresent else { return }
            try await bus.export(adapterPath, [AdapterObject.interface(adapterSnapshot, simulator: self)])
            removalUnannounced = nil  // the last process's, gone with its connection
            if deviceKnown {
                deviceExported = true
                try await bus.export(devicePath, [deviceInterface(rssi: nil)])
            }
        } catch {
            clientWatchTask?.cancel()
            clientWatchTask = nil
            deviceExported = false
            if bluez === bus { bluez = nil }
            await bus.close()
            throw error
        }
    }

    /// Kills bluetoothd: the org.bluez connection closes with no
    /// InterfacesRemoved (clients see only NameOwnerChanged), the link drops
    /// (the dongle advertises), every notify and discovery session is gone.
    /// Returns at once; a new bluetoothd comes up after `restartAfter`.
    public func crash(restartAfter delay: Duration) async {
        guard !stopped, let bus = bluez else { return }
        log.record(.crash)
        bluez = nil
        // The strangers' objects lived in its memory: gone, unannounced.
        _ = forgetStrangers()
        forgetBluetoothdState(reason: "bluetoothd-crash")
        await bus.close()
        scheduleRestart(after: delay)
        await publishControl()
    }

    /// bluetoothd's main loop hangs for `duration` (a deadlock, a blocking
    /// call), as seen in the field: it keeps its name, so nothing on the bus
    /// says it is gone, but it answers no call (not even a D-Bus ping), sends
    /// no signal and passes no GATT traffic: the dongle hears no keep-alive
    /// and its idle clock runs on. Afterwards it serves what queued. On a
    /// virtual loop the hang is a freeze from now (`SimulatorLoops.freeze`);
    /// on a real one, the thread sleeps once it has run what is queued.
    public func hang(for duration: Duration) {
        guard !stopped, bluez != nil else { return }
        log.record(.hang) { $0.reason = "\(Int(duration / .milliseconds(1)))" }
        if let freezeBluezLoop {
            freezeBluezLoop(bluezLoop, duration)
            return
        }
        let (seconds, attoseconds) = duration.components
        bluezLoop.execute {
            var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            var remaining = timespec()
            while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
        }
    }

    /// Stops bluetoothd cleanly: InterfacesRemoved for every object, then the
    /// name is released; a new bluetoothd comes up after `after`.
    public func restart(after delay: Duration) async {
        guard !stopped, let bus = bluez else { return }
        log.record(.restart)
        bluez = nil
        var paths = gattExported ? (exportedGatt ?? gatt).removalOrder : []
        if deviceExported { paths.append(devicePath) }
        paths += forgetStrangers()
        if adapterPresent { paths.append(adapterPath) }
        forgetBluetoothdState(reason: "bluetoothd-restart")
        await bus.unexportObjects(paths)
        try? await bus.releaseName(BlueZ.service)
        await bus.close()
        scheduleRestart(after: delay)
        await publishControl()
    }

    /// Everything bluetoothd kept in memory, gone; the dongle only notices
    /// that the link dropped.
    private func forgetBluetoothdState(reason: String) {
        clientWatchTask?.cancel()
        clientWatchTask = nil
        // Agents lived in its memory; bonds are on disk and stay.
        forgetAgents(reason: reason)
        forgetAdapterState(reason: reason)
    }

    /// What bluetoothd kept about the adapter and its device: gone with the
    /// adapter (or with bluetoothd).
    func forgetAdapterState(reason: String) {
        generation += 1
        cancelPendingConnect()
        _ = markLinkLost(reason: reason, asleep: false)
        forgetGhostLink()
        dropAllNotifySessions(reason: reason)
        releaseAllAcquisitions(reason: reason)
        releasedToAnnounce.removeAll()
        forgetDiscoverySessions(reason: reason)
        discovering = false
        scanTask?.cancel()
        scanTask = nil
        rssiPublished = false
        deviceExported = false
        gattExported = false
        exportedGatt = nil
        servicesResolved = false
    }

    private func scheduleRestart(after delay: Duration) {
        guard !stopped else { return }
        restartTask?.cancel()
        restartTask = spawn { simulator in
            guard await simulator.sleepUnlessCancelled(delay) else { return }
            await simulator.finishRestart()
        }
    }

    private func finishRestart() async {
        guard !stopped, bluez == nil else { return }
        do {
            try await bringUpBluetoothd()
            log.record(.restarted)
        } catch {
            log.record(.restarted) {
                $0.error = (error as? DBusError)?.name ?? "restart-failed"
                $0.message = String(describing: error)
            }
        }
    }
}
