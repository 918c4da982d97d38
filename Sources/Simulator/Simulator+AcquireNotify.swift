import BlueZ
import DBus
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// GattCharacteristic1.AcquireNotify as bluetoothd 5.66 serves it
/// (src/gatt-client.c): a `SOCK_SEQPACKET` socketpair per characteristic,
/// one datagram per notification, and the rules around it.
///
/// - The exclusion rules: AcquireNotify is `InProgress` while any notify
///   session exists and `NotPermitted "Notify acquired"` while the socket is
///   held (StartNotify gets the same); StopNotify from anyone closes it.
/// - The socket exists only once the CCCD write is done: notifications in
///   between are dropped (`acquireSocketDelay`, logged `notify-dropped`
///   with reason `socket-not-ready`).
/// - bluetoothd's end is non-blocking: a reader that falls behind loses
///   notifications (`acquireSendBuffer` makes that easy to provoke; logged
///   `notify-dropped` with reason `reader-behind`).
/// - Every link loss, bluetoothd exit and StopNotify closes the socket
///   (`notify-released`), and nothing re-arms it: the client acquires again.
///   A client closing its end (or leaving the bus) releases it at once.
/// - 5.66's leftover (fixed in 5.84, commit 476ae809a): a link loss while the
///   CCCD write is under way leaves the acquisition behind without a socket
///   (`acquire-stale`). The AcquireNotify call is never answered, both
///   AcquireNotify and StartNotify are `NotPermitted "Notify acquired"` from
///   then on, and a StopNotify on it is a use-after-free in bluetoothd
///   (simulated as a crash). Only bluetoothd's exit clears it.
extension Simulator {
    /// One acquired characteristic (bluetoothd's `notify_io`).
    struct NotifyAcquisition {
        let client: String
        /// The link it was acquired on.
        let link: Int
        /// bluetoothd's end; nil until the CCCD write is done.
        var socket: Int32?
        /// Left behind by a link loss during the CCCD write: no socket will
        /// come, and its caller waits (this wait) for a reply that never comes.
        var staleWait: Int?
    }

    func acquireNotify(_ characteristic: GattDatabase.Characteristic, client: String) async throws -> [DBusValue] {
        try ensureRunning()
        // bluetoothd: no GATT client (no link) is Failed "Not connected"; a
        // client that is not ready yet holds the reply until it is.
        guard dongle.state == .connected || ghostLink, gattExported else { throw BlueZFault.gattNotConnected }
        // The CCCD write of a locked-up controller is never answered.
        try await awaitWedgedController(failingWith: BlueZFault.failed("Operation failed"), after: options.attTimeout)
        let path = characteristic.path
        if notifyAcquisitions[path] != nil { throw BlueZFault.notPermitted("Notify acquired") }
        if !(notifySessions[path]?.isEmpty ?? true) { throw BlueZFault.inProgress }
        guard characteristic.flags.contains("notify") else { throw BlueZFault.notSupported }
        // The CCCD write is an ATT request: the dongle may want encryption.
        try await ensureEncryption()
        if notifyAcquisitions[path] != nil { throw BlueZFault.notPermitted("Notify acquired") }
        if !(notifySessions[path]?.isEmpty ?? true) { throw BlueZFault.inProgress }
        let link = linkID
        notifyAcquisitions[path] = NotifyAcquisition(client: client, link: link)
        // The CCCD is written now: the dongle starts notifying.
        log.record(.acquireNotify) {
            $0.client = client
            $0.uuid = characteristic.uuid
        }
        if !servicesResolved { _ = await waitForServicesResolved() }
        updateTelemetry()
        if options.acquireSocketDelay > .zero { await pause(options.acquireSocketDelay) }
        if let wait = notifyAcquisitions[path]?.staleWait {
            // The link went while the CCCD write was under way: bluetoothd
            // 5.66 never answers. The caller hears of it only when this
            // bluetoothd goes (or its own call times out).
            await pause(.seconds(86_400), id: wait)
            throw BlueZFault.gattNotConnected
        }
        guard notifyAcquisitions[path]?.link == link, link == linkID, servicesResolved, let bus = bluez else {
            throw BlueZFault.gattNotConnected
        }
        var pair: [Int32] = [-1, -1]
        #if canImport(Glibc)
        // glibc declares the socket types in an enum, musl as plain integers.
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        #else
        let type = SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC
        #endif
        guard socketpair(AF_UNIX, type, 0, &pair) == 0 else {
            notifyAcquisitions[path] = nil
            updateTelemetry()
            throw BlueZFault.failed(String(cString: strerror(errno)))
        }
        let (ours, theirs) = (pair[0], pair[1])
        if let size = options.acquireSendBuffer {
            var bytes = Int32(clamping: size)
            _ = setsockopt(ours, SOL_SOCKET, SO_SNDBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
        }
        notifyAcquisitions[path]?.socket = ours
        watchForHangup(path, socket: ours, on: bus.loop)
        log.record(.notifySocketReady) {
            $0.client = client
            $0.uuid = characteristic.uuid
        }
        try? await bus.setProperties(path, BlueZ.gattCharacteristicInterface, ["NotifyAcquired": .boolean(true)])
        return [.unixFD(UnixFileDescriptor(owning: theirs)), .uint16(GattDatabase.mtu)]
    }

    /// Returns once the current link's services are resolved (true), or
    /// when the link or bluetoothd goes first (false).
    func waitForServicesResolved() async -> Bool {
        if servicesResolved { return true }
        guard dongle.state == .connected, !stopped else { return false }
        return await withCheckedContinuation { servicesResolvedWaiters.append($0) }
    }

    /// Answers everyone waiting in `waitForServicesResolved`.
    func resumeServicesResolvedWaiters(_ resolved: Bool) {
        let waiters = servicesResolvedWaiters
        servicesResolvedWaiters.removeAll()
        for waiter in waiters { waiter.resume(returning: resolved) }
    }

    /// bluetoothd's `sock_hup`: the client closed its end (or left the bus
    /// and the kernel closed it), and the acquisition ends at once.
    private func watchForHangup(_ path: ObjectPath, socket: Int32, on bluetoothd: EventLoop) {
        let watch = WatchBox()
        bluetoothd.execute {
            watch.id = bluetoothd.watch(socket, interest: []) { _ in
                if let id = watch.id { bluetoothd.removeWatch(id) }
                watch.id = nil
                Task(executorPreference: self.loop) { await self.acquiredSocketHungUp(path, socket: socket) }
            }
        }
        hangupWatches[socket] = watch
    }

    private func acquiredSocketHungUp(_ path: ObjectPath, socket: Int32) async {
        guard notifyAcquisitions[path]?.socket == socket else { return }
        releaseAcquisition(path, reason: "client-closed", client: nil)
        await announceReleased()
    }

    /// Ends the acquisition of `path`: the socket closes (the client reads
    /// end-of-file) and NotifyAcquired turns false once announced.
    func releaseAcquisition(_ path: ObjectPath, reason: String, client: String?) {
        guard let acquisition = notifyAcquisitions.removeValue(forKey: path) else { return }
        if let wait = acquisition.staleWait { cancelWait(wait) }
        if let socket = acquisition.socket {
            let watch = hangupWatches.removeValue(forKey: socket)
            // The watch goes before the descriptor, on the loop that has it
            // (every bluetoothd incarnation's).
            let bluetoothd = bluezLoop
            bluetoothd.execute {
                if let id = watch?.id { bluetoothd.removeWatch(id) }
                watch?.id = nil
                close(socket)
            }
        }
        log.record(.notifyReleased) {
            $0.client = client ?? acquisition.client
            $0.uuid = gatt.characteristic(at: path)?.uuid
            $0.reason = reason
        }
        releasedToAnnounce.append(path)
        updateTelemetry()
    }

    /// bluetoothd exits (or the device goes): every acquisition ends, stale ones too.
    func releaseAllAcquisitions(reason: String) {
        for path in notifyAcquisitions.keys.sorted() { releaseAcquisition(path, reason: reason, client: nil) }
    }

    /// The link went: sockets are shut down (btd_gatt_client_disconnected);
    /// an acquisition still waiting for its CCCD write is left stale.
    func linkLostForAcquisitions(reason: String) {
        for path in notifyAcquisitions.keys.sorted() {
            guard let acquisition = notifyAcquisitions[path], acquisition.staleWait == nil else { continue }
            if acquisition.socket != nil {
                releaseAcquisition(path, reason: reason, client: nil)
            } else {
                notifyAcquisitions[path]?.staleWait = makeWaitID()
                log.record(.acquireStale) {
                    $0.client = acquisition.client
                    $0.uuid = gatt.characteristic(at: path)?.uuid
                    $0.reason = reason
                }
            }
        }
        updateTelemetry()
    }

    /// Whether `path` is acquired with a socket or waiting for one (not stale).
    func isLiveAcquisition(_ path: ObjectPath) -> Bool {
        notifyAcquisitions[path].map { $0.staleWait == nil } ?? false
    }

    /// NotifyAcquired=false for the acquisitions released since the last call
    /// (nothing to announce when bluetoothd is gone).
    func announceReleased() async {
        let paths = releasedToAnnounce
        releasedToAnnounce.removeAll()
        guard gattExported, let bus = bluez else { return }
        for path in paths {
            try? await bus.setProperties(path, BlueZ.gattCharacteristicInterface, ["NotifyAcquired": .boolean(false)])
        }
    }

    /// One telemetry tick's notifications on an acquired characteristic:
    /// each a datagram, or dropped (and logged) as bluetoothd would drop it.
    func sendAcquired(_ path: ObjectPath, _ notifications: [(sequence: UInt32, payload: [UInt8])]) async {
        var sent: [UInt32] = []
        var dropped: [(UInt32, String)] = []
        var hungUp = false
        for notification in notifications {
            guard !hungUp, let socket = notifyAcquisitions[path]?.socket else {
                dropped.append((notification.sequence, hungUp ? "no-socket" : "socket-not-ready"))
                continue
            }
            let result = notification.payload.withUnsafeBytes { bytes in
                systemSend(socket, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            }
            if result == notification.payload.count {
                sent.append(notification.sequence)
            } else if errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS {
                dropped.append((notification.sequence, "reader-behind"))
            } else {
                hungUp = true
                dropped.append((notification.sequence, "no-socket"))
            }
        }
        log.recordNotifications(sent)
        log.recordDropped(dropped)
        if hungUp {
            releaseAcquisition(path, reason: "client-closed", client: nil)
            await announceReleased()
        }
    }
}

/// A loop watch's id, set on the loop and read there.
final class WatchBox: @unchecked Sendable {
    var id: EventLoop.WatchID?
}

/// send(2), under a name of its own: the simulator has `send` methods, and
/// the C library's module is Glibc or Musl.
private func systemSend(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int, _ flags: Int32) -> Int {
    send(fd, buffer, count, flags)
}
