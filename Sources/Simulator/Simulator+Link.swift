import BlueZ
import DBus
import EventLoop

/// Device1.Connect/Disconnect, link loss, and the dongle's sleep model.
extension Simulator {
    // MARK: Connect

    func connectDevice(client: String) async throws {
        try ensureRunning()
        log.record(.connectRequest) { $0.client = client }
        do {
            // Registered in the same step as the request, as bluetoothd's
            // handler does (device->connect): a Disconnect queued behind
            // this Connect finds it pending whatever runs between the two.
            let started = try startConnect(client: client)
            try await performConnect(client: client, started: started)
        } catch {
            log.record(.connectFailed) {
                $0.client = client
                $0.error = error.name
                $0.message = error.message
            }
            throw error
        }
    }

    /// A connection under way: what `startConnect` registered.
    struct ConnectStart {
        var waitID: Int
        var generation: Int
        var wedged: Bool
    }

    /// Connect's first step, with no suspension: bluetoothd's checks, then
    /// the connection registered as pending. Nil: answered from bluetoothd's
    /// own state (the device is connected).
    func startConnect(client: String) throws(DBusError) -> ConnectStart? {
        // bluetoothd checks these before it starts a connection.
        guard powered else { throw BlueZFault.notReady }
        guard pendingConnect == nil else { throw BlueZFault.connectInProgress }
        // The kernel stops a running scan for an LE connection.
        if discoveryStopQueued { connectStoppedScan = true }
        // An LE Connect on a connected device succeeds (it is not
        // AlreadyConnected); bluetoothd answers it from its own state, so a
        // link only it still believes in (a locked-up controller) counts.
        if dongle.state == .connected || ghostLink { return nil }
        // The kernel still holds the link bluetoothd let go of (a Disconnect
        // through a locked-up controller): the ATT socket's connect fails.
        if lockup?.kernelHoldsLink == true { throw BlueZFault.kernelLinkBusy }
        let started = ConnectStart(waitID: makeWaitID(), generation: generation, wedged: lockup != nil)
        pendingConnect = PendingConnect(waitID: started.waitID, client: client)
        return started
    }

    /// Connect's work after `startConnect`; Pair() connects with both too.
    func performConnect(client: String, started: ConnectStart?) async throws(DBusError) {
        guard let started else { return }
        let waitID = started.waitID
        let startGeneration = started.generation
        let wedged = started.wedged
        // Cancelled (a Disconnect) before its wait began: nothing to wait for.
        guard pendingConnect?.waitID == waitID else { throw BlueZFault.abortByLocal }
        // A locked-up controller never answers LE Create Connection: the
        // kernel's command times out and the connection fails.
        await pause(wedged ? options.hciCommandTimeout : connectLatency, id: waitID)
        guard pendingConnect?.waitID == waitID, generation == startGeneration, !stopped else {
            // Disconnect (or bluetoothd going away) cancelled the attempt.
            throw BlueZFault.abortByLocal
        }
        pendingConnect = nil
        guard powered else { throw BlueZFault.notReady }
        if wedged || lockup != nil { throw BlueZFault.abortByLocal }
        if staleDevice { throw BlueZFault.abortByLocal }
        if let failure = dongle.takeInjectedFailure() {
            throw .remote(name: failure.errorName, message: failure.message)
        }
        if !dongle.acceptsConnection {
            // Nothing answers: the kernel keeps initiating until its timeout,
            // bluetoothd still counts the connect as pending (so a second one
            // gets InProgress and Disconnect cancels it), and a dongle woken
            // meanwhile is connected at once.
            let noAnswer = makeWaitID()
            pendingConnect = PendingConnect(waitID: noAnswer, client: client)
            await pause(options.noAnswerTimeout, id: noAnswer)
            guard pendingConnect?.waitID == noAnswer, generation == startGeneration, !stopped else {
                throw BlueZFault.abortByLocal
            }
            pendingConnect = nil
            guard powered else { throw BlueZFault.notReady }
            guard dongle.acceptsConnection, lockup == nil else { throw BlueZFault.abortByLocal }
        }
        // bluetoothd crashed or restarted while this call waited: the
        // connection it asked for died with it.
        guard bluez != nil, generation == startGeneration else { throw BlueZFault.abortByLocal }
        // bluetoothd holds a key the dongle no longer has: the encryption
        // that comes before GATT fails and the kernel drops the link.
        if paired, !dongleHasKey { throw await connectWithoutPeerKey(client: client) }
        await linkEstablished()
    }

    /// Connected=true goes out before this returns, hence before the Connect
    /// reply (unless `connectedUnsignalled`); the GATT objects and
    /// ServicesResolved follow after `resolveDelay`.
    private func linkEstablished() async {
        dongle.linkUp(at: loop.now)
        linkID += 1
        let link = linkID
        // The ATT channel is up: every surviving notify session is
        // registered again (gatt_client_init → btd_gatt_client_connected).
        dormantNotifySessions.removeAll()
        // A bonded device's link is encrypted with the stored key before its
        // ATT channel is used ("Elevating security level since LTK is available").
        linkEncrypted = paired && dongleHasKey
        // bluetoothd stores a device it has connected to: it survives restarts.
        deviceKnown = true
        advertisingTask?.cancel()
        advertisingTask = nil
        log.record(.connected)
        await setDeviceProperties(["Connected": .boolean(true)], emitSignal: !options.connectedUnsignalled)
        guard link == linkID, !stopped else { return }
        idleTask = spawn { await $0.watchIdleness(link: link) }
        resolveTask = spawn { await $0.resolveServices(link: link) }
        await publishControl()
    }

    private func resolveServices(link: Int) async {
        guard await sleepUnlessCancelled(options.resolveDelay), link == linkID else { return }
        if options.resolvedBeforeObjects {
            // The race real BlueZ shows: the flag first, the objects later.
            await setDeviceProperties(["ServicesResolved": .boolean(true)])
            guard await sleepUnlessCancelled(.milliseconds(50)), link == linkID else { return }
            await exportGatt()
        } else {
            await exportGatt()
            guard link == linkID else { return }
            await setDeviceProperties(["ServicesResolved": .boolean(true)])
        }
    }

    /// Exports the GATT objects (one InterfacesAdded each) unless the GATT
    /// cache kept them, and marks the services resolved. Characteristics
    /// whose notify sessions survived a link loss are Notifying=true and
    /// notifications resume without a new StartNotify.
    private func exportGatt() async {
        guard let bus = bluez, dongle.state == .connected else { return }
        // Objects exported before show the Notifying they had; new ones are
        // exported with it.
        let cachedNotifying = gattExported ? notifyingOnNextLink : []
        notifyingOnNextLink.removeAll()
        if gattExported, let old = exportedGatt, old.layout != gatt.layout {
            // The firmware changed while disconnected: this connection's
            // discovery finds another database and replaces the cached objects.
            await replaceGattObjects(old, reason: "between-connections")
        }
        if !gattExported {
            gattExported = true
            exportedGatt = gatt
            let notifying = Set(notifySessions.filter { !$0.value.isEmpty }.keys)
            let objects = gatt.exportedObjects(devicePath: devicePath, simulator: self, notifying: notifying)
            try? await bus.exportObjects(objects)
        }
        for path in cachedNotifying.sorted() where !(notifySessions[path]?.isEmpty ?? true) {
            await setNotifying(path, true)
        }
        guard dongle.state == .connected else { return }
        servicesResolved = true
        resumeServicesResolvedWaiters(true)
        updateTelemetry()
    }

    // MARK: A changed GATT database

    /// bluetoothd's side of a new database (gatt-client.c on Service Changed,
    /// or a new discovery): the old objects go (InterfacesRemoved), with the
    /// notify sessions and acquired sockets on them, and the new ones are
    /// exported, none notifying: the client must subscribe again.
    func replaceGattObjects(_ old: GattDatabase, reason: String) async {
        for path in old.characteristics.map(\.path) {
            if let clients = notifySessions.removeValue(forKey: path) {
                for client in clients.sorted() {
                    log.record(.stopNotify) {
                        $0.client = client
                        $0.uuid = old.characteristic(at: path)?.uuid
                        $0.reason = "gatt-changed"
                    }
                }
            }
            if notifyAcquisitions[path] != nil { releaseAcquisition(path, reason: "gatt-changed", client: nil) }
        }
        releasedToAnnounce.removeAll()
        gattExported = false
        exportedGatt = nil
        log.record(.gattObjectsReplaced) { $0.reason = reason }
        guard let bus = bluez else { return }
        await bus.unexportObjects(old.removalOrder)
        gattExported = true
        exportedGatt = gatt
        try? await bus.exportObjects(gatt.exportedObjects(devicePath: devicePath, simulator: self, notifying: []))
        updateTelemetry()
    }

    /// Ends the Connect bluetoothd is still making: its wait wakes and the
    /// call fails (`le-connection-abort-by-local`). False when none was.
    @discardableResult
    func cancelPendingConnect() -> Bool {
        guard let pending = pendingConnect else { return false }
        pendingConnect = nil
        cancelWait(pending.waitID)
        return true
    }

    // MARK: Disconnect

    func disconnectDevice(client: String) async throws {
        try ensureRunning()
        log.record(.disconnectRequest) { $0.client = client }
        // Disconnect cancels a pending connect; that Connect fails.
        if cancelPendingConnect() { return }
        if ghostLink {
            // The locked-up controller never answers HCI Disconnect; after
            // the kernel's command timeout bluetoothd takes the link as gone
            // (Connected=false, no reason on the management socket) while
            // the kernel keeps its connection (make e2e's uart-lockup:
            // bluetoothd 5.66 and kernel 6.1 answered after 2.4 s).
            let startGeneration = generation
            await pause(options.hciCommandTimeout)
            guard generation == startGeneration, ghostLink, lockup != nil else { return }
            await endGhostLink(reason: "disconnect", kernelKeepsIt: true, client: client)
            return
        }
        guard dongle.state == .connected else { throw BlueZFault.notConnected }
        let link = linkID
        let startGeneration = generation
        await pause(options.disconnectDelay)
        guard generation == startGeneration, link == linkID else { return }
        await loseLink(reason: "disconnect", asleep: false, client: client)
    }

    // MARK: Link loss

    /// The link is gone: Connected=false and ServicesResolved=false in one
    /// PropertiesChanged; with the GATT cache off, InterfacesRemoved for each
    /// GATT object too. Notify sessions stay. The dongle advertises again, or
    /// sleeps if `asleep`.
    func loseLink(reason: String, asleep: Bool, client: String? = nil) async {
        guard dongle.state == .connected else { return }
        let removedGatt = exportedGatt
        let wasPaired = paired
        let hadGatt = markLinkLost(reason: reason, asleep: asleep, client: client)
        if let bus = bluez {
            await bus.announceLinkLoss(
                device: deviceExported ? devicePath : nil,
                reason: options.disconnectedSignal ? Self.disconnectedReason(reason) : nil,
                removing: hadGatt ? (removedGatt ?? gatt).removalOrder : []
            )
        }
        // A pairing without bonding lasted this connection (device_remove_connection).
        if wasPaired, !paired { await setDeviceProperties(["Paired": .boolean(false)]) }
        await announceReleased()
        await publishControl()
    }

    /// `Device1.Disconnected`'s arguments (BlueZ ≥ 5.83, src/bearer.c) for
    /// the simulator's reasons: an RF loss is the supervision timeout, the
    /// dongle ending it (its idle sleep, "remote") is the remote, and this
    /// side's Disconnect, power-off and RemoveDevice are local.
    static func disconnectedReason(_ reason: String) -> (name: String, message: String) {
        switch reason {
        case "link-loss", "timeout", "supervision-timeout":
            ("org.bluez.Reason.Timeout", "Connection timeout")
        case "remote", "idle", "sleep":
            ("org.bluez.Reason.Remote", "Connection terminated by remote user")
        case "disconnect", "power-off", "rfkill", "device-removed", "att-timeout", "local":
            ("org.bluez.Reason.Local", "Connection terminated by local host")
        case "authentication":
            ("org.bluez.Reason.Authentication", "Connection terminated due to authentication failure")
        default:
            ("org.bluez.Reason.Unknown", "Unspecified")
        }
    }

    /// The state side of a link loss, without bus traffic (a crashing
    /// bluetoothd announces nothing). Returns whether GATT objects must be
    /// removed from the bus (they were exported and the GATT cache is off).
    func markLinkLost(reason: String, asleep: Bool, client: String? = nil) -> Bool {
        guard dongle.state == .connected else { return false }
        dongle.linkDown(asleep: asleep)
        linkID += 1
        // Sessions outlive the link unregistered (btd_gatt_client_disconnected).
        dormantNotifySessions = notifySessions.filter { !$0.value.isEmpty }
        linkEncrypted = false
        // A pairing waiting on its agent ends with the link (the agent gets
        // Cancel()); one that was not bonded ends here too (Paired=false).
        abortAgentRequest(reason: "link-lost", tellAgent: true)
        if paired, !bonded { paired = false }
        for task in [resolveTask, telemetryTask, idleTask] { task?.cancel() }
        resolveTask = nil
        telemetryTask = nil
        idleTask = nil
        servicesResolved = false
        // bluetoothd shuts every acquired socket down with the link
        // (btd_gatt_client_disconnected): the client reads end-of-file.
        linkLostForAcquisitions(reason: reason)
        resumeServicesResolvedWaiters(false)
        let hadGatt = gattExported && !options.gattCache
        if hadGatt {
            gattExported = false
            exportedGatt = nil
        }
        log.record(.disconnected) {
            $0.reason = reason
            $0.client = client
        }
        if asleep {
            log.record(.sleep) { $0.reason = reason }
        } else {
            enterAdvertising()
        }
        return hadGatt
    }

    // MARK: Sleep model

    /// While connected, the firmware drops the link and powers off when no
    /// GATT read or write came for `sleepAfter` (the loop's clock).
    private func watchIdleness(link: Int) async {
        while link == linkID, dongle.state == .connected {
            let deadline = dongle.idleDeadline(sleepAfter: options.sleepAfter)
            if loop.now >= deadline, applicationHung != nil {
                // The firmware's idle timer is part of the hung application.
                dongle.noteActivity(at: loop.now)
                continue
            }
            if loop.now >= deadline {
                await loseLink(reason: "idle", asleep: true)
                return
            }
            guard await sleepUnlessCancelled(until: deadline) else { return }
        }
    }

    /// The dongle advertises for `advertiseTimeout`, then powers off unless a
    /// central connected meanwhile.
    func enterAdvertising() {
        guard !stopped else { return }
        log.record(.advertising)
        advertisingEpoch += 1
        let epoch = advertisingEpoch
        advertisingTask?.cancel()
        advertisingTask = spawn { await $0.endAdvertising(epoch: epoch) }
    }

    private func endAdvertising(epoch: Int) async {
        guard await sleepUnlessCancelled(options.advertiseTimeout), epoch == advertisingEpoch,
              dongle.state == .advertising
        else { return }
        fallAsleep(reason: "advertising-timeout")
        await publishControl()
    }

    func fallAsleep(reason: String) {
        guard dongle.state == .advertising else { return }
        advertisingTask?.cancel()
        advertisingTask = nil
        dongle.fallAsleep()
        log.record(.sleep) { $0.reason = reason }
    }
}
