import DBus
import EventLoop

/// Watches bluetoothd on a bus, synchronously on the bus's event loop: its
/// name, its object tree and property changes become `BlueZEvent`s handed
/// to `onEvent` in bus order, with no task or buffer in between.
///
/// Threading: confined to the bus's loop: every method runs there, and the
/// bus's callbacks (which it registers) run there too. It is
/// `@unchecked Sendable` only so those callbacks may capture it.
///
/// Device1 property changes come from every device until the owner names
/// one (`watchDevice(at:)`): a daemon that knows its dongle's path hears only
/// that device's, not every advertisement of a busy street (bluetoothd sends
/// one PropertiesChanged per advertisement while a filtered discovery runs);
/// `sampleOtherDevices` lets the rest in again until told to stop.
///
/// Invariants:
/// - events come only from the current owner of org.bluez; a restart shows
///   as `serviceVanished` then `serviceAppeared` with a fresh snapshot;
/// - a Device1 change is handed over once: the sample passes on only what
///   is not the watched device's;
/// - while a snapshot (GetManagedObjects) is in flight, the owner's signals
///   are skipped: bluetoothd answers after emitting them, so the snapshot
///   already holds what they said.
public final class BlueZMonitor: @unchecked Sendable {
    private let client: BlueZClient
    private let onEvent: (BlueZEvent) -> Void
    private var owner: String?
    private var snapshotPending = false
    private var generation = 0
    private var handlerID: Int?
    private var deviceHandlerID: Int?
    private var sampleHandlerID: Int?
    private var deliver: (@Sendable (Message) -> Void)?
    /// The devices whose Device1 property changes are heard; nil: every
    /// device's (`watchDevices(at:)`).
    public private(set) var watchedDevices: [ObjectPath]?
    public var samplingOtherDevices: Bool { sampleHandlerID != nil }

    public var currentOwner: String? { owner }

    public init(client: BlueZClient, onEvent: @escaping (BlueZEvent) -> Void) {
        self.client = client
        self.onEvent = onEvent
    }

    private var loop: EventLoop { client.bus.loop }

    /// Installs the match rules (awaiting the bus), then asks who owns org.bluez.
    /// The first event is `serviceAppeared` if bluetoothd is on the bus.
    public func start(_ deliver: @escaping @Sendable (Message) -> Void) async throws(BlueZError) {
        do {
            handlerID = try await client.bus.addSignalHandler(matchingAny: Self.rules, deliver)
            deviceHandlerID = try await client.bus.addSignalHandler(matchingAny: Self.deviceRules(watchedDevices), deliver)
            self.deliver = deliver
        } catch {
            throw BlueZError(error)
        }
    }

    /// Hears Device1 property changes only of the devices at `paths` (nil:
    /// of every device) from now on, on the loop. The new rules are
    /// installed before the old ones go, so nothing falls between them (a
    /// change may come twice meanwhile: each is a state, not a count).
    public func watchDevices(at paths: [ObjectPath]?) {
        guard paths != watchedDevices, let deliver, let old = deviceHandlerID else { return }
        watchedDevices = paths
        client.bus.assumeIsolated { bus in
            deviceHandlerID = bus.addSignalHandlerNow(matchingAny: Self.deviceRules(paths), deliver)
            bus.removeSignalHandlerNow(old)
        }
        if paths == nil { sampleOtherDevices(false) }
    }

    /// Lets every device's property changes in (`true`) besides the watched
    /// device's, or stops that (`false`), on the loop. What the watched
    /// device's rule already delivers is not handed over again.
    public func sampleOtherDevices(_ on: Bool) {
        guard on != samplingOtherDevices else { return }
        client.bus.assumeIsolated { bus in
            if let id = sampleHandlerID {
                bus.removeSignalHandlerNow(id)
                sampleHandlerID = nil
            } else if watchedDevices != nil {
                sampleHandlerID = bus.addSignalHandlerNow(matchingAny: [Self.deviceRule(nil)]) { [self] message in
                    handleSampled(message)
                }
            }
        }
    }

    private func handleSampled(_ signal: Message) {
        guard sampleHandlerID != nil, let path = signal.path, watchedDevices?.contains(path) != true else { return }
        handle(signal)
    }

    /// Called after `start` on the loop: asks the bus who owns org.bluez.
    public func queryOwner(attempt: Int = 0) {
        let generation = self.generation
        // Replies run on the loop.
        let send: @Sendable (Result<Message, DBusError>) -> Void = { [self] result in
            guard generation == self.generation, self.owner == nil else { return }
            switch result {
            case .success(let reply):
                if let name = reply.body.first?.string { self.appeared(name) }
            case .failure(.remote(let name, _)) where name == DBusErrorName.nameHasNoOwner:
                break
            case .failure:
                if attempt < 2 { self.loop.schedule(after: .milliseconds(100 << attempt)) { self.queryOwner(attempt: attempt + 1) } }
            }
        }
        client.bus.assumeIsolated { bus in
            bus.startCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                method: "GetNameOwner", [.string(BlueZ.service)], completion: send
            )
        }
    }

    /// Removes the match rules; when it returns, every signal the bus routed
    /// here before has been handled.
    public func stop() async {
        guard let handlerID else { return }
        self.handlerID = nil
        deliver = nil
        await client.bus.removeSignalHandler(handlerID)
        for id in [deviceHandlerID, sampleHandlerID].compactMap({ $0 }) {
            await client.bus.removeSignalHandler(id)
        }
        deviceHandlerID = nil
        sampleHandlerID = nil
    }

    /// Each names who may send it (`MatchRule`: the bus checks the stamped
    /// sender) and the body's signature, so a forged or misshapen signal is
    /// dropped before it is decoded.
    /// Device1's property changes are not here: `deviceRule` has them, for
    /// one device or all. Every other interface's are (by arg0, which
    /// bluetoothd's PropertiesChanged carries first).
    static let rules = BlueZClient.serviceRules.filter { $0.member != "PropertiesChanged" } + [
        BlueZ.adapterInterface, BlueZ.gattServiceInterface, BlueZ.gattCharacteristicInterface, BlueZ.gattDescriptorInterface,
    ].map { interface in
        MatchRule(
            sender: BlueZ.service, interface: StandardInterface.properties, member: "PropertiesChanged",
            pathNamespace: "/org/bluez", arg0: interface, signature: "sa{sv}as"
        )
    } + [
        // BlueZ ≥ 5.83: why a link went. Harmless where it never comes.
        MatchRule(
            sender: BlueZ.service, interface: BlueZ.deviceInterface, member: "Disconnected", pathNamespace: "/org/bluez",
            signature: "ss"
        ),
    ]

    /// One rule per watched device; one for all when nil.
    static func deviceRules(_ paths: [ObjectPath]?) -> [MatchRule] {
        guard let paths else { return [deviceRule(nil)] }
        return paths.map { deviceRule($0) }
    }

    /// Device1's property changes of the device at `path`, or of all.
    /// One device's is a `path` rule, not a `path_namespace` one: with both
    /// as path_namespace rules, dbus-daemon 1.14.10's RemoveMatch of the
    /// rule for all devices removed the one device's instead and left the
    /// other (seen with `Debug.Stats.GetAllMatchRules` in `make bench`).
    static func deviceRule(_ path: ObjectPath?) -> MatchRule {
        MatchRule(
            sender: BlueZ.service, interface: StandardInterface.properties, member: "PropertiesChanged",
            path: path, pathNamespace: path == nil ? "/org/bluez" : nil, arg0: BlueZ.deviceInterface,
            signature: "sa{sv}as"
        )
    }

    /// One signal from the bus, on the loop. The bus hands over only what
    /// `rules` admit; the sender is checked again here all the same, since
    /// acting on a forged NameOwnerChanged would blind the daemon.
    public func handle(_ signal: Message) {
        if signal.member == "NameOwnerChanged", signal.interface == "org.freedesktop.DBus" {
            guard signal.sender == "org.freedesktop.DBus", signal.signature == "sss" else { return }
            let newOwner = signal.body.count >= 3 ? (signal.body[2].string ?? "") : ""
            // The owner we announced may reach us again as a NameOwnerChanged from before we asked.
            if newOwner == owner { return }
            if owner != nil {
                owner = nil
                generation += 1
                snapshotPending = false
                onEvent(.serviceVanished)
            }
            if !newOwner.isEmpty { appeared(newOwner) }
            return
        }
        guard let owner, signal.sender == owner, !snapshotPending else { return }
        if let event = BlueZClient.event(from: signal) { onEvent(event) }
    }

    private func appeared(_ newOwner: String) {
        owner = newOwner
        generation += 1
        snapshot(attempt: 0)
    }

    /// bluetoothd takes its name before it exports its objects: retried
    /// briefly, then, if it still gives no tree (hung, or refusing us: a
    /// timeout, an access denial), reported once and asked again at a
    /// growing pace, for as long as it owns the name. An empty tree in its
    /// place would hide its adapter and devices for good: bluetoothd never
    /// announces again objects it already has.
    private func snapshot(attempt: Int) {
        snapshotPending = true
        let generation = self.generation
        client.send(.getManagedObjects) { [self] result in
            guard generation == self.generation, let owner = self.owner else { return }
            let problem: BlueZError
            switch result {
            case .success(let body):
                guard let first = body.first else {
                    problem = .malformed("an empty GetManagedObjects reply")
                    break
                }
                do throws(BlueZError) {
                    let tree = try ObjectTree(managedObjects: first)
                    snapshotPending = false
                    onEvent(.serviceAppeared(owner: owner, tree: tree))
                    return
                } catch {
                    problem = error
                }
            case .failure(let error):
                problem = error
            }
            if attempt == Self.quickAttempts - 1 { onEvent(.serviceUnanswered(owner: owner, error: problem)) }
            loop.schedule(after: Self.delay(afterAttempt: attempt)) { [self] in
                guard generation == self.generation else { return }
                snapshot(attempt: attempt + 1)
            }
        }
    }

    /// Snapshots asked for quickly (0.1, 0.2, 0.4, 0.8 s apart) before the
    /// failure is reported.
    static let quickAttempts = 5

    /// The wait before the snapshot after `attempt` (0-based): 100 ms
    /// doubling over the quick attempts, then 5 s doubling to a minute
    /// (each unanswered call also waits out its own timeout).
    static func delay(afterAttempt attempt: Int) -> Duration {
        if attempt < quickAttempts - 1 { return .milliseconds(100 << attempt) }
        return min(.seconds(60), .seconds(5 << min(attempt - (quickAttempts - 1), 4)))
    }
}
