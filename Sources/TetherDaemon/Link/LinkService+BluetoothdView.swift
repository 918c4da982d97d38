import BlueZ
import Configuration
import DBus
import EventLoop
import FoundationEssentials
import LinkPolicy
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import HCI
import LinkSupervisor
import Logging
import Readings
import Rfkill
import Synchronization
import ControllerDevice

/// bluetoothd's object tree into the supervisor's observation: the dongle, its adapter, its address.
extension LinkService {
    func apply(_ event: BlueZEvent) {
        switch event {
        case .serviceAppeared, .serviceVanished, .serviceUnanswered:
            break  // the bus's news, not bluetoothd's
        default:
            // Anything bluetoothd sends says it runs again (a hang it came out of).
            if liveness.unansweredSince != nil { liveness.heardFrom() }
        }
        switch event {
        case .valueChanged(let path, let bytes):
            recordValue(path, bytes)
            return
        case .propertiesChanged(let path, BlueZ.gattCharacteristicInterface, let changed, _):
            // bluetoothd flushes a notification's Value together with any
            // property change still pending on the object (Notifying=true
            // right after StartNotify): a reading all the same.
            if let bytes = changed["Value"]?.bytes { recordValue(path, bytes) }
        case .deviceDisconnected(let path, let reason, _):
            bluezSendsReasons = true
            if path == resolution.device?.path {
                let heard = DisconnectReasons.Reason(bluezReason: reason)
                reasonHeard(heard, address: deviceAddress)
                if heard == .authenticationFailure { deliver(.bondRejected("bluetoothd: \(reason)")) }
            }
            return
        case .serviceAppeared:
            bluezPresent = true
            forgetBluezLiveness()
            // Agents die with bluetoothd: register (again) before anything
            // else is sent to this one, which alone the agent answers.
            agent?.setBluezOwner(monitor.currentOwner)
            if let agent { lane.registerAgent(agent) }
        case .serviceUnanswered(let owner, let error):
            // Still waiting for bluetoothd: nothing to resolve without its tree.
            report.logger.warning(
                "bluetoothd (\(owner)) owns org.bluez but gives no object tree: \(error); asking again every minute at most (a bluetoothd hung for good needs systemctl restart bluetooth)",
                metadata: ["event": "bluez-unanswered"]
            )
            return
        case .serviceVanished:
            bluezPresent = false
            forgetBluezLiveness()
            agent?.setBluezOwner(nil)
        default:
            break
        }
        followAddressChange(event)
        tree.apply(event)
        // In a crowded place discovery reports many other devices; their
        // RSSI updates cannot change which adapter, dongle or
        // characteristics we use, so they skip the re-resolution.
        if let advertiser = advertiser(in: event), advertiser != resolution.device?.path {
            othersAdvertised()
            noticeBootloader(at: advertiser)
        }
        if case .propertiesChanged(let path, BlueZ.deviceInterface, let changed, let invalidated) = event, path != resolution.device?.path {
            // Another device: once the dongle's object is known nothing it
            // does changes the resolution. Before (the dongle away, its
            // object gone), an advertisement's fields of a device that
            // cannot be the dongle change nothing either: only this one
            // object is looked at, not the tree.
            if resolution.device != nil { return }
            if Self.advertisementOnly(changed, invalidated), let device = tree.device(path),
               !resolver.mayBeTheDongle(device, known: dongleAddress)
            {
                return
            }
        }
        let previous = resolution
        resolution = annotated(resolver.resolve(tree, bluezPresent: bluezPresent, lastAddress: lastAdapterAddress, known: dongleAddress))
        if let adapter = resolution.adapter {
            for note in binding.matched(resolver.matchingDevices(tree, adapter: adapter), chosen: resolution.device?.address) {
                report.logger.notice("\(note)", metadata: ["event": "dongle-matches"])
            }
        }
        if let address = resolution.adapter?.address, !address.isEmpty, address != "00:00:00:00:00:00" {
            lastAdapterAddress = address.uppercased()
        }
        if resolution != previous { resolutionChangedSincePublish = true }
        if bluezPresent, resolution.adapter != previous.adapter || previous.adapter == nil {
            for note in adapterWatch.update(resolved: resolution.adapter, adapters: tree.adapters) {
                report.logger.notice("\(note)", metadata: ["event": "\(note.eventName)"])
            }
        }
        if let adapter = resolution.adapter, adapter.interfaceName != previous.adapter?.interfaceName
            || adapter.address != previous.adapter?.address
        {
            identifyController(adapter)
        }
        notifyPaths = resolution.notify.map { ($0.path.rawValue, $0.uuid) }
        updateDeviceScope()
        if let address = resolution.device?.address { deviceAddress = address }
        agent?.setDongle(resolution.device?.path)
        let gattMoved = !previous.notify.isEmpty && previous.notify.map(\.path) != resolution.notify.map(\.path)
            && previous.device?.path == resolution.device?.path && resolution.observation.connected
        shared.withLock { s in
            s.adapter = resolution.adapter?.interfaceName
            if resolution.adapter == nil { s.controller = nil }
            s.device = resolution.device?.address ?? config.dongle.address
        }
        deliverObservationIfChanged()
        if gattMoved {
            report.logger.notice(
                "the dongle's GATT database changed: \(resolution.notify.isEmpty ? "its notify characteristics are gone for now" : "notify characteristics now at \(resolution.notify.map(\.path.rawValue).joined(separator: ", "))")",
                metadata: ["event": "gatt-changed"]
            )
            deliver(.characteristicsChanged)
        }
        if isAdvertisement(event, device: resolution.device?.path) {
            dongleSeen()
            deliver(.advertising)
        }
        updateControllerCheck()
        updateAdapterProblem()
    }

    /// Reads an acquired socket until bluetoothd closes it: each datagram is
    /// a notification, recorded as one that came as a signal. Its end is a
    /// link-loss sign for the supervisor (bluetoothd's Connected=false
    /// usually follows; whichever comes first counts).
    func read(_ acquired: AcquiredNotifications, of characteristic: GattCharacteristic) {
        notifyReaders.removeValue(forKey: characteristic.path)?.close()
        let uuid = characteristic.uuid
        let path = characteristic.path
        notifyReaders[path] = NotificationSocketReader(acquired, loop: loop) { [unowned self] bytes in
            takeNotification(bytes, characteristic: uuid)
        } onEnd: { [unowned self] end in
            notifyReaders[path] = nil
            report.logger.debug("\(uuid): \(end)")
            deliver(.notificationsEnded(end.description))
        }
    }

    /// Gives every acquired socket back (closing it is how).
    func closeNotifyReaders() {
        for reader in notifyReaders.values { reader.close() }
        notifyReaders.removeAll()
    }

    func recordValue(_ path: ObjectPath, _ bytes: [UInt8]) {
        guard let entry = notifyPaths.first(where: { $0.path == path.rawValue }) else { return }
        takeNotification(bytes, characteristic: entry.uuid)
    }

    func takeNotification(_ bytes: [UInt8], characteristic uuid: String) {
        notifiedThisTurn = true
        take(Reading(receivedAt: wallClock(), device: deviceAddress, characteristic: uuid, source: .notify, payload: bytes))
    }

    /// Tether took up a controller (or the one it uses moved or changed its
    /// address): the journal says what it is, once, and status shows it.
    func identifyController(_ adapter: Adapter) {
        let transport = kernel.transport(of: adapter.interfaceName)
        report.logger.notice(
            "\(ControllerIdentity.line(name: adapter.interfaceName, address: adapter.address.uppercased(), transport: transport, escalate: config.reconnect.escalate, uartUnit: config.reconnect.uartUnit))",
            metadata: ["event": "controller", "adapter": "\(adapter.interfaceName)"])
        shared.withLock { $0.controller = transport?.description }
    }

    /// Hears Device1 changes of the dongle's object alone once its address
    /// (config or binding) and adapter are known, and samples the others
    /// (`DeviceScope`).
    func updateDeviceScope() {
        let paths = DeviceScope.watchedPaths(address: dongleAddress, adapter: resolution.adapter?.path, resolved: resolution.device)
        guard paths != monitor.watchedDevices else { return }
        monitor.watchDevices(at: paths)
        if let samplingPause { loop.cancelTimer(samplingPause) }
        samplingPause = nil
        if paths != nil { monitor.sampleOtherDevices(true) }
    }

    /// The dongle's own object changed its Address: BlueZ learnt its
    /// identity address in pairing (`DongleIdentity`). Followed before the
    /// tree takes the change, so the resolution finds the same object.
    func followAddressChange(_ event: BlueZEvent) {
        guard case .propertiesChanged(let path, BlueZ.deviceInterface, let changed, _) = event,
              let device = resolution.device, path == device.path, let address = changed["Address"]?.string
        else { return }
        let move = identity.addressChanged(
            of: device, to: address, newType: changed["AddressType"]?.string, knownAs: dongleAddress,
            configured: config.dongle.address, bound: binding.bound
        )
        switch move {
        case .followConfigured(let warning):
            report.logger.warning("\(warning)", metadata: ["event": "dongle-identity", "device": "\(address.uppercased())"])
        case .rebind(let to, let notice):
            report.logger.notice("\(notice)", metadata: ["event": "dongle-identity", "device": "\(to)"])
            if let error = binding.follow(to: to) {
                report.logger.error("\(error)", metadata: ["event": "dongle-binding-unstored"])
            }
            shared.withLock { $0.boundDongle = binding.bound }
        case nil:
            break
        }
    }

    /// Another device advertised: if it is the dongle's DFU bootloader, said
    /// once an episode and shown in status.
    func noticeBootloader(at path: ObjectPath) {
        guard let address = dongleAddress, identity.bootloader == nil, let device = tree.device(path),
              DongleIdentity.isBootloader(device, of: address), let line = identity.bootloaderSeen(device, of: address)
        else { return }
        report.logger.notice("\(line)", metadata: ["event": "dongle-in-bootloader", "device": "\(device.address)"])
        shared.withLock { $0.bootloader = device.address }
        metrics?.observeBootloader(true)
        resolutionChangedSincePublish = true
        publishIfChanged([])
    }

    /// The dongle itself advertised or came online: a bootloader episode,
    /// if any, is over.
    func dongleSeen() {
        guard identity.bootloader != nil, let address = dongleAddress, let line = identity.dongleSeen(address) else { return }
        report.logger.notice("\(line)", metadata: ["event": "dongle-left-bootloader", "device": "\(address)"])
        shared.withLock { $0.bootloader = nil }
        metrics?.observeBootloader(false)
        resolutionChangedSincePublish = true
        publishIfChanged([])
    }

    /// Device1 properties bluetoothd sets from each advertisement: none of
    /// them makes a device match the config (name, address, services do).
    static let advertisementProperties: Set<String> = [
        "RSSI", "TxPower", "ManufacturerData", "ServiceData", "AdvertisingData", "AdvertisingFlags",
    ]

    static func advertisementOnly(_ changed: [String: DBusValue], _ invalidated: [String]) -> Bool {
        changed.keys.allSatisfy(advertisementProperties.contains) && invalidated.allSatisfy(advertisementProperties.contains)
    }

    /// An RSSI update (or a newly found device object with one) is the sign
    /// that discovery saw the dongle advertise.
    func isAdvertisement(_ event: BlueZEvent, device: ObjectPath?) -> Bool {
        guard let device else { return false }
        return advertiser(in: event) == device
    }

    /// The device an event shows advertising (an RSSI in a change or in a
    /// new object: bluetoothd sets it from an advertisement), if any.
    func advertiser(in event: BlueZEvent) -> ObjectPath? {
        switch event {
        case .propertiesChanged(let path, let interface, let changed, _):
            return interface == BlueZ.deviceInterface && changed["RSSI"] != nil ? path : nil
        case .interfacesAdded(let path, let interfaces):
            return interfaces.stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary?["RSSI"] != nil ? path : nil
        default:
            return nil
        }
    }

    /// The link came online: a config that finds the dongle by name or
    /// service binds this gateway to it now, if nothing was bound.
    func bindOnFirstLink(to address: String) {
        let bound = binding.online(with: address)
        if let notice = bound.notice {
            report.logger.notice("\(notice)", metadata: ["event": "dongle-bound", "device": "\(address)"])
            if let device = resolution.device, device.address == address, !device.bonded, DongleIdentity.isResolvablePrivate(device) {
                report.logger.warning(
                    "the dongle \(address) advertises a resolvable private address, which it changes every few minutes: the binding finds it again only once BlueZ knows its identity address, which pairing gives (dongle.pairing)",
                    metadata: ["event": "dongle-private-address", "device": "\(address)"])
            }
        }
        if let error = bound.error { report.logger.error("\(error)", metadata: ["event": "dongle-binding-unstored"]) }
        if bound.notice != nil || bound.error != nil { shared.withLock { $0.boundDongle = binding.bound } }
        updateDeviceScope()
    }

    /// Forgets the binding, then reconnects: the strongest matching device
    /// is tried and the first to come online is bound. For `tether rebind`.
    public func rebind(waitingUpTo limit: Duration = .seconds(20)) async -> RebindOutcome {
        if let address = config.dongle.address { return .fixedByConfig(address) }
        let forgotten = await withCheckedContinuation { (continuation: CheckedContinuation<Result<String?, DongleBinding.Failure>, Never>) in
            loop.execute { [self] in
                do throws(DongleBinding.Failure) {
                    let was = try binding.forget()
                    shared.withLock { $0.boundDongle = nil }
                    report.logger.notice(
                        "\(was.map { "the binding to \($0) is forgotten" } ?? "no dongle was bound") (tether rebind); the first matching device to come online will be bound",
                        metadata: ["event": "dongle-unbound"])
                    resolution = annotated(resolver.resolve(tree, bluezPresent: bluezPresent, lastAddress: lastAdapterAddress, known: nil))
                    updateDeviceScope()
                    deliverObservationIfChanged()
                    continuation.resume(returning: .success(was))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        switch forgotten {
        case .failure(let error): return .failed(error.description)
        case .success(let was): return .forgotten(was, await reconnect(waitingUpTo: limit))
        }
    }

    /// Another device advertised: evidence that the controller hears the
    /// air (`Supervisor.controllerEvidence`). Told at most every
    /// `othersAdvertisingEvery`: in a busy street they come many a second.
    func othersAdvertised() {
        let now = start.duration(to: loop.now)
        if othersAdvertisingToldAt.map({ now - $0 >= Self.othersAdvertisingEvery }) ?? true {
            othersAdvertisingToldAt = now
            deliver(.othersAdvertising)
        }
        // Heard: the sample has done its job until the next one is due.
        guard monitor.samplingOtherDevices, let told = othersAdvertisingToldAt else { return }
        monitor.sampleOtherDevices(false)
        if let samplingPause { loop.cancelTimer(samplingPause) }
        samplingPause = loop.schedule(after: told + Self.othersAdvertisingEvery - now) { [unowned self] in
            samplingPause = nil
            if monitor.watchedDevices != nil { monitor.sampleOtherDevices(true) }
        }
    }

    static let othersAdvertisingEvery: Duration = .seconds(10)
}
