import BlueZ
import DBus
import DurationUnits
import EventLoop

/// GattCharacteristic1 methods and the telemetry stream.
extension Simulator {
    /// GATT calls need a link (as bluetoothd sees it: a locked-up
    /// controller's lost link too); bluetoothd answers Failed "Not connected".
    private func requireLink() throws(DBusError) {
        guard !stopped, dongle.state == .connected || ghostLink, servicesResolved else { throw BlueZFault.gattNotConnected }
    }

    /// The characteristic's current value as a read returns it.
    private func currentValue(of characteristic: GattDatabase.Characteristic) -> [UInt8] {
        characteristic.path == gatt.batteryLevel.path ? [dongle.batteryLevel] : []
    }

    /// A request to a peer whose ATT is hung: BlueZ waits out its ATT
    /// timeout, then fails the call and drops the bearer (the link).
    private func awaitHungPeer(_ client: String) async throws(DBusError) {
        guard let hung = applicationHung, !hung.attAnswers else { return }
        let link = linkID
        let wait = makeWaitID()
        await pause(options.attTimeout, id: wait)
        guard link == linkID, dongle.state == .connected else { throw BlueZFault.gattNotConnected }
        log.record(.attTimeout) { $0.client = client }
        await loseLink(reason: "att-timeout", asleep: false)
        throw BlueZFault.failed("Operation failed")
    }

    func readCharacteristic(
        _ characteristic: GattDatabase.Characteristic, client: String, options: [String: DBusValue]
    ) async throws -> [UInt8] {
        try requireLink()
        try await awaitWedgedController(failingWith: BlueZFault.failed("Operation failed"), after: self.options.attTimeout)
        try await awaitHungPeer(client)
        guard characteristic.isReadable else { throw BlueZFault.notPermitted("Read not permitted") }
        try await ensureEncryption()
        let value = currentValue(of: characteristic)
        let offset = options["offset"]?.int64 ?? 0
        guard offset >= 0, offset <= Int64(value.count) else { throw BlueZFault.invalidOffset }
        dongle.noteActivity(at: loop.now)
        log.record(.read) {
            $0.client = client
            $0.uuid = characteristic.uuid
        }
        // bluetoothd announces a read result as a Value change, then replies.
        try? await bluez?.setProperties(characteristic.path, BlueZ.gattCharacteristicInterface, ["Value": .bytes(value)])
        return Array(value[Int(offset)...])
    }

    func writeCharacteristic(
        _ characteristic: GattDatabase.Characteristic, value: [UInt8], client: String, options: [String: DBusValue],
        noReply: Bool = false
    ) async throws {
        try requireLink()
        let type = options["type"]?.string ?? "request"
        let permitted: Bool
        switch type {
        case "command": permitted = characteristic.acceptsWriteCommand
        case "request", "reliable": permitted = characteristic.acceptsWriteRequest
        default: throw BlueZFault.invalidArguments()
        }
        guard permitted else { throw BlueZFault.notPermitted("Write not permitted") }
        if lockup != nil {
            // A locked-up controller: a write command is queued in the
            // kernel and goes nowhere (bluetoothd answers it at once); a
            // request waits for an ATT response that never comes.
            if type == "command" { return }
            try await awaitWedgedController(failingWith: BlueZFault.failed("Operation failed"), after: self.options.attTimeout)
        }
        if type == "command" {
            // Never raised (no response, no error): a dongle that wants
            // encryption drops it, and it is no activity to the firmware.
            if dongleDropsWriteCommands { return }
        } else {
            try await ensureEncryption()
        }
        // A write command needs no answer: the radio takes it, hung or not.
        if type != "command" { try await awaitHungPeer(client) }
        // A slow air or a busy controller (`setGattLatency`): the write
        // reaches the dongle, and its answer comes, that much later.
        if gattLatency > .zero, !noReply {
            await pause(gattLatency)
            try requireLink()
        }
        dongle.noteActivity(at: loop.now)
        log.record(.write) {
            $0.client = client
            $0.uuid = characteristic.uuid
            $0.hex = value.map { byte in
                let hex = String(byte, radix: 16)
                return hex.count == 1 ? "0" + hex : hex
            }.joined()
            $0.type = type
            if noReply { $0.noReply = true }
        }
    }

    /// Notify sessions belong to the caller's unique name; a second
    /// StartNotify from the same client succeeds without a second session,
    /// unless that session waits for a link (`dormantNotifySessions`):
    /// then `InProgress`, as gatt-client.c answers a client whose session
    /// has no notify id. With no link (the cached objects still exported),
    /// a new session is made dormant and the call succeeds: the next link
    /// enables it. Not activity for the idle timer.
    func startNotify(_ characteristic: GattDatabase.Characteristic, client: String) async throws {
        try ensureRunning()
        if notifyAcquisitions[characteristic.path] != nil { throw BlueZFault.notPermitted("Notify acquired") }
        guard characteristic.isNotifiable else { throw BlueZFault.notSupported }
        var sessions = notifySessions[characteristic.path] ?? []
        if sessions.contains(client) {
            if dormantNotifySessions[characteristic.path]?.contains(client) == true { throw BlueZFault.inProgress }
            return
        }
        if dongle.state != .connected, !ghostLink {
            sessions.insert(client)
            notifySessions[characteristic.path] = sessions
            dormantNotifySessions[characteristic.path, default: []].insert(client)
            if sessions.count == 1 { notifyingOnNextLink.insert(characteristic.path) }
            log.record(.startNotify) {
                $0.client = client
                $0.uuid = characteristic.uuid
                $0.reason = "until-connected"
            }
            return
        }
        try requireLink()
        // A new session writes the CCCD: an ATT request.
        try await awaitWedgedController(failingWith: BlueZFault.failed("Operation failed"), after: options.attTimeout)
        if sessions.isEmpty { try await ensureEncryption() }
        sessions = notifySessions[characteristic.path] ?? []
        guard sessions.insert(client).inserted else { return }
        notifySessions[characteristic.path] = sessions
        dormantNotifySessions[characteristic.path]?.remove(client)
        log.record(.startNotify) {
            $0.client = client
            $0.uuid = characteristic.uuid
        }
        updateTelemetry()
        guard sessions.count == 1 else { return }
        if options.valueWithNotifying, characteristic.path == gatt.tx.path, let bus = bluez {
            let next = dongle.nextNotification()
            let changes: [String: DBusValue] = ["Notifying": .boolean(true), "Value": .bytes(next.payload)]
            if (try? await bus.setProperties(characteristic.path, BlueZ.gattCharacteristicInterface, changes)) != nil {
                log.recordNotifications([next.sequence])
            }
        } else {
            await setNotifying(characteristic.path, true)
        }
    }

    func stopNotify(_ characteristic: GattDatabase.Characteristic, client: String) async throws {
        try ensureRunning()
        if notifyAcquisitions[characteristic.path]?.staleWait != nil {
            // 5.66: destroy_sock on the leftover frees its notify client a
            // second time. Fixed in 5.84; here, bluetoothd dies.
            log.record(.acquireStale) {
                $0.client = client
                $0.uuid = characteristic.uuid
                $0.reason = "stop-notify: use-after-free"
            }
            await crash(restartAfter: .seconds(1))
            throw BlueZFault.failed("bluetoothd crashed")
        }
        // Whoever calls it, StopNotify closes an acquired socket.
        if notifyAcquisitions[characteristic.path] != nil {
            releaseAcquisition(characteristic.path, reason: "stop-notify", client: client)
            await announceReleased()
            return
        }
        guard notifySessions[characteristic.path]?.remove(client) != nil else {
            throw BlueZFault.failed("No notify session started")
        }
        await notifySessionEnded(characteristic.path, client: client, reason: nil)
    }

    /// Bookkeeping after a session went away (StopNotify or the client left
    /// the bus): Notifying turns false with the last session.
    func notifySessionEnded(_ path: ObjectPath, client: String, reason: String?) async {
        log.record(.stopNotify) {
            $0.client = client
            $0.uuid = gatt.characteristic(at: path)?.uuid
            $0.reason = reason
        }
        updateTelemetry()
        if notifySessions[path]?.isEmpty ?? true {
            notifySessions[path] = nil
            await setNotifying(path, false)
        }
    }

    func setNotifying(_ path: ObjectPath, _ on: Bool) async {
        guard gattExported, let bus = bluez else { return }
        try? await bus.setProperties(path, BlueZ.gattCharacteristicInterface, ["Notifying": .boolean(on)])
    }

    func readDescriptor(_ descriptor: GattDatabase.Descriptor) async throws -> [UInt8] {
        try requireLink()
        let enabled = !(notifySessions[descriptor.characteristicPath]?.isEmpty ?? true)
            || isLiveAcquisition(descriptor.characteristicPath)
        return enabled ? [0x01, 0x00] : [0x00, 0x00]
    }

    // MARK: Telemetry

    /// Runs the telemetry task exactly while it should: link up, GATT
    /// resolved, a notify session on TX and a rate above zero.
    func updateTelemetry() {
        // A dongle that wants encryption notifies only on an encrypted link.
        let wanted = !stopped && dongle.state == .connected && servicesResolved && notifyRate > 0 && applicationHung == nil
            && (linkEncrypted || !options.pairing.requiresEncryption)
            && (!(notifySessions[gatt.tx.path]?.isEmpty ?? true) || isLiveAcquisition(gatt.tx.path))
        if wanted, telemetryTask == nil {
            let link = linkID
            telemetryTask = spawn { await $0.sendTelemetry(link: link) }
        } else if !wanted {
            telemetryTask?.cancel()
            telemetryTask = nil
        }
    }

    /// Sends `notifyRate` notifications per second. Ticks are at least 1 ms
    /// apart; faster rates send several per tick, keeping the average exact.
    /// After a stall it sends at most 100 ms worth at once and skips the
    /// rest, as a radio that missed its connection events would.
    private func sendTelemetry(link: Int) async {
        let rate = notifyRate
        guard rate > 0 else { return }
        let interval = max(Duration.milliseconds(1), Duration.seconds(1 / rate))
        let maxBurst = max(1, Int(rate / 10))
        let start = loop.now
        var deadline = start
        var sent = 0
        while true {
            deadline = deadline + interval
            let now = loop.now
            if deadline + interval < now { deadline = now }
            guard await sleepUnlessCancelled(until: deadline) else { return }
            guard !Task.isCancelled, link == linkID, servicesResolved, let bus = bluez else { return }
            var due = Int(start.duration(to: loop.now).inSeconds * rate) - sent
            if due > maxBurst {
                sent += due - maxBurst
                due = maxBurst
            }
            guard due > 0 else { continue }
            sent += due
            if isLiveAcquisition(gatt.tx.path) {
                var notifications: [(sequence: UInt32, payload: [UInt8])] = []
                notifications.reserveCapacity(due)
                for _ in 0..<due {
                    let next = dongle.nextNotification()
                    notifications.append((next.sequence, next.payload))
                }
                await sendAcquired(gatt.tx.path, notifications)
                await publishSequence()
                continue
            }
            var payloads: [[UInt8]] = []
            var sequences: [UInt32] = []
            payloads.reserveCapacity(due)
            sequences.reserveCapacity(due)
            for _ in 0..<due {
                let next = dongle.nextNotification()
                payloads.append(next.payload)
                sequences.append(next.sequence)
            }
            let delivered = await bus.notifyValues(gatt.tx.path, interface: BlueZ.gattCharacteristicInterface, payloads)
            // Only what really went out is ground truth for the tests.
            log.recordNotifications(Array(sequences.prefix(delivered)))
            await publishSequence()
        }
    }
}
