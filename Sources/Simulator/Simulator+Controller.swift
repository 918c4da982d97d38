import BlueZ
import DBus
import EventLoop
import Rfkill

/// The controller under bluetoothd: its rfkill switch and a lockup, as the
/// kernel (6.1) and bluetoothd 5.66 handle them.
///
/// rfkill (`setRfkill`, or a client's `RFKILL_OP_CHANGE` on the simulated
/// `/dev/rfkill`, see `RfkillServer`):
/// - a block, soft or hard, makes the kernel close the controller:
///   `Powered` goes false and the link drops, as a power-off does; powering
///   it on fails with `Failed "Blocked through rfkill"` while it lasts;
/// - once neither block is left, bluetoothd powers the adapter on again
///   (`btd_adapter_restore_powered`, whatever its power was before);
/// - a client's write changes the soft block only: an unblock during a hard
///   block clears soft, and the adapter stays off until hard lifts;
/// - a held soft block (`setRfkill(soft: true, hard:, held: true)`, the
///   simulator's stand-in for another program, say a desktop's airplane
///   mode, that keeps the switch blocked) is blocked again at once after a
///   client's unblock: its readers see CHANGE unblocked, then blocked, and
///   the adapter stays off;
/// - a controller that goes (`removeAdapter`) takes its switch with it (DEL);
///   one that comes gets a new switch, unblocked (ADD).
///
/// A lockup (`setLockup`): the USB controller's firmware stops answering
/// HCI commands. bluetoothd does not notice: `Powered` stays true, and a
/// link the controller had stays `Connected` (the controller never reports
/// its end) while the dongle, which hears nothing any more, drops it after
/// its supervision timeout and advertises; notifications stop. Calls that
/// need the controller fail after the kernel's command timeout
/// (`hciCommandTimeout`: StartDiscovery `InProgress`, StopDiscovery and
/// Connect `Failed`) or its ATT timeout (GATT requests, new notify
/// sessions: `Failed "Operation failed"`), or are never answered while the
/// believed link lasts (RemoveDevice). A Disconnect of the believed link
/// times out in the kernel: bluetoothd then drops the link (Connected=false,
/// no reason from the kernel) while the kernel keeps its connection, and
/// every Connect to the device fails at once (`Failed "Input/output
/// error"`, bt_io_connect's EBUSY) until the lockup ends, as in `make e2e`'s
/// uart-lockup on bluetoothd 5.66 and kernel 6.1. What bluetoothd answers
/// from its own state (properties, Connect on the believed link, a
/// StartNotify repeated by a client holding a session, write commands)
/// still answers. It ends with `setLockup(false)` (the controller answers
/// again and reports the link lost), with a power cycle if it was set so
/// (off, then on: the HCI Reset of opening it unwedges it; otherwise
/// powering on fails and the adapter stays off), or with the controller
/// leaving (`removeAdapter`, what a USB reset does). The simulator cannot
/// see an HCI reset or a USB reset of its own.
extension Simulator {
    // MARK: rfkill

    var radioBlocked: Bool { softBlocked || hardBlocked }

    /// The controller's name (`hci0`), what its switch's sysfs `name` says.
    var controllerName: String {
        adapterPath.rawValue.split(separator: "/").last.map(String.init) ?? "hci0"
    }

    private func rfkillRecord(_ operation: RfkillEvent.Operation) -> RfkillEvent {
        RfkillEvent(
            index: rfkillIndex, type: RfkillEvent.bluetoothType, operation: operation, softBlocked: softBlocked,
            hardBlocked: hardBlocked
        )
    }

    /// Serves the simulated `/dev/rfkill`, with the controller's switch.
    func startRfkill(loop: EventLoop) throws {
        guard let directory = options.rfkillDirectory else { return }
        let (writes, input) = AsyncStream.makeStream(of: RfkillEvent.self, bufferingPolicy: .unbounded)
        let server = try RfkillServer.start(directory: directory, loop: loop) { input.yield($0) }
        rfkillServer = server
        // One task applies the clients' writes, in the order they came.
        rfkillWrites = Task(executorPreference: self.loop) { [weak self] in
            for await event in writes { await self?.rfkillWritten(event) }
        }
        if adapterPresent { server.update(rfkillRecord(.add), name: controllerName) }
    }

    func addRfkillSwitch() {
        rfkillIndex = nextRfkillIndex
        nextRfkillIndex += 1
        softBlocked = false
        hardBlocked = false
        rfkillServer?.update(rfkillRecord(.add), name: controllerName)
    }

    func removeRfkillSwitch() {
        rfkillServer?.update(rfkillRecord(.delete))
        softBlocked = false
        hardBlocked = false
    }

    /// Sets both blocks of the controller's switch, as a hardware switch
    /// (hard) and `rfkill block` (soft) would.
    public func setRfkill(soft: Bool, hard: Bool, held: Bool = false) async {
        softBlockHeld = soft && held
        await setRadioBlock(soft: soft, hard: hard, origin: "control")
    }

    /// A record a client wrote: `RFKILL_OP_CHANGE` sets the soft block of
    /// the switch it names (type Bluetooth or all), `RFKILL_OP_CHANGE_ALL`
    /// that of every switch of its type. The hard block is the hardware's.
    private func rfkillWritten(_ event: RfkillEvent) async {
        guard event.type == 0 || event.type == RfkillEvent.bluetoothType else { return }
        switch event.operation {
        case .change: guard event.index == rfkillIndex else { return }
        case .changeAll: break
        case .add, .delete: return
        }
        if softBlockHeld, softBlocked, !event.softBlocked {
            // The kernel applies the write; the holder blocks again before
            // bluetoothd can power anything on.
            softBlocked = false
            log.record(.rfkill) {
                $0.reason = Self.blockName(soft: false, hard: hardBlocked)
                $0.type = "client"
            }
            rfkillServer?.update(rfkillRecord(.change))
            softBlocked = true
            log.record(.rfkill) {
                $0.reason = Self.blockName(soft: true, hard: hardBlocked)
                $0.type = "held"
            }
            rfkillServer?.update(rfkillRecord(.change))
            return
        }
        await setRadioBlock(soft: event.softBlocked, hard: hardBlocked, origin: "client")
    }

    private func setRadioBlock(soft: Bool, hard: Bool, origin: String) async {
        guard !stopped, adapterPresent, soft != softBlocked || hard != hardBlocked else { return }
        let wasBlocked = radioBlocked
        softBlocked = soft
        hardBlocked = hard
        log.record(.rfkill) {
            $0.reason = Self.blockName(soft: soft, hard: hard)
            $0.type = origin
        }
        rfkillServer?.update(rfkillRecord(.change))
        if radioBlocked, !wasBlocked {
            await changePower(false, reason: "rfkill")
        } else if !radioBlocked, wasBlocked {
            await changePower(true, reason: "rfkill-unblock")
        }
    }

    /// `soft`, `hard`, `soft+hard` or `none`, as the control interface takes them.
    static func blockName(soft: Bool, hard: Bool) -> String {
        switch (soft, hard) {
        case (false, false): "none"
        case (true, false): "soft"
        case (false, true): "hard"
        case (true, true): "soft+hard"
        }
    }

    // MARK: Lockup

    /// The controller stops answering (`on`), or answers again. With
    /// `clearsOnPowerCycle`, the next power cycle ends it too.
    public func setLockup(_ on: Bool, clearsOnPowerCycle: Bool = true) async {
        guard !stopped else { return }
        guard on else {
            guard lockup != nil else { return }
            clearLockup(reason: "lockup-off")
            // The controller reports the link it lost meanwhile.
            await endGhostLink(reason: "timeout")
            return
        }
        guard adapterPresent, lockup == nil else { return }
        lockup = Lockup(clearsOnPowerCycle: clearsOnPowerCycle)
        log.record(.controllerLockup) {
            $0.on = true
            $0.reason = clearsOnPowerCycle ? "until-power-cycle" : "until-lockup-off"
        }
        strandLink()
        await publishControl()
    }

    /// Ends the lockup (when `condition` holds for it).
    func clearLockup(reason: String, when condition: (Lockup) -> Bool = { _ in true }) {
        guard let lockup, condition(lockup) else { return }
        // The controller answers again or was reset: the kernel's stale
        // connection (`kernelHoldsLink`) goes with the lockup.
        self.lockup = nil
        log.record(.controllerLockup) {
            $0.on = false
            $0.reason = reason
        }
    }

    /// The dongle's side of a lockup: its link times out and it advertises;
    /// bluetoothd keeps believing in it (no signal, the objects as they were).
    private func strandLink() {
        guard dongle.state == .connected else { return }
        dongle.linkDown(asleep: false)
        linkID += 1
        for task in [resolveTask, telemetryTask, idleTask] { task?.cancel() }
        resolveTask = nil
        telemetryTask = nil
        idleTask = nil
        ghostLink = true
        enterAdvertising()
    }

    /// bluetoothd hears at last that the believed link is down (power-off,
    /// rfkill, the controller answering again), or gives it up
    /// (`kernelKeepsIt`: its Disconnect timed out in the kernel, which still
    /// holds the connection until the lockup ends): Connected=false as for
    /// any link loss, acquired sockets closed, held calls answered.
    func endGhostLink(reason: String, kernelKeepsIt: Bool = false, client: String? = nil) async {
        guard ghostLink else { return }
        lockup?.kernelHoldsLink = kernelKeepsIt
        let removedGatt = exportedGatt
        let hadGatt = gattExported && !options.gattCache
        if hadGatt {
            gattExported = false
            exportedGatt = nil
        }
        forgetGhostLink()
        linkLostForAcquisitions(reason: reason)
        log.record(.disconnected) {
            $0.reason = reason
            $0.client = client
        }
        if let bus = bluez {
            await bus.announceLinkLoss(
                device: deviceExported ? devicePath : nil,
                reason: options.disconnectedSignal ? Self.disconnectedReason(reason) : nil,
                removing: hadGatt ? (removedGatt ?? gatt).removalOrder : []
            )
        }
        await announceReleased()
        await publishControl()
    }

    /// The believed link's state, gone without bus traffic (bluetoothd went).
    func forgetGhostLink() {
        guard ghostLink else { return }
        ghostLink = false
        servicesResolved = false
        resumeServicesResolvedWaiters(false)
        for wait in ghostLinkWaits { cancelWait(wait) }
        ghostLinkWaits.removeAll()
    }

    /// Holds a call until the believed link ends.
    func waitForGhostLinkEnd() async {
        let wait = makeWaitID()
        ghostLinkWaits.append(wait)
        await pause(.seconds(86_400), id: wait)
    }

    /// A call bluetoothd passes to the locked-up controller: it fails with
    /// `error` after `timeout` (the kernel's command timeout by default).
    /// Returns at once while the controller answers.
    func awaitWedgedController(failingWith error: DBusError, after timeout: Duration? = nil) async throws(DBusError) {
        guard lockup != nil else { return }
        await pause(timeout ?? options.hciCommandTimeout)
        throw error
    }
}

// MARK: The controller's kernel side (HCI reset, the controller check)

extension Simulator {
    /// What the controller answers a command of its own (HCI Read Local
    /// Version) with.
    public enum ControllerAnswer: Sendable, Equatable {
        case answers
        /// Locked up: the command times out.
        case silent
        /// Not in the kernel.
        case absent
    }

    public var controllerAnswer: ControllerAnswer {
        guard adapterPresent else { return .absent }
        return lockup == nil ? .answers : .silent
    }

    /// An HCI reset of the controller (HCIDEVRESET): a locked-up controller
    /// answers again, its links are gone, and bluetoothd sees it powered
    /// off and on. Returns false when there is no controller to reset.
    public func resetController() async -> Bool {
        guard !stopped, adapterPresent else { return false }
        clearLockup(reason: "hci-reset")
        await endGhostLink(reason: "hci-reset")
        guard !radioBlocked else { return true }
        await changePower(false, reason: "hci-reset")
        await changePower(true, reason: "hci-reset")
        return true
    }
}
