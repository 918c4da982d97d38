import DBus

/// The sequence `BlueZClient.events()` returns.
///
/// It turns bus signals into `BlueZEvent`s as it is iterated, so the only
/// buffer between bluetoothd and the consumer is the bus's bounded signal
/// stream, and no task sits in between. It tracks who owns org.bluez:
/// signals from anyone else (a previous bluetoothd) are ignored.
public struct BlueZEvents: AsyncSequence, Sendable {
    public typealias Element = BlueZEvent

    let client: BlueZClient
    let deliveries: AsyncStream<SignalDelivery>

    public func makeAsyncIterator() -> Iterator {
        Iterator(client: client, deliveries: deliveries.makeAsyncIterator())
    }

    public struct Iterator: AsyncIteratorProtocol {
        let client: BlueZClient
        var deliveries: AsyncStream<SignalDelivery>.AsyncIterator
        var owner: String?
        var started = false
        /// The current owner's tree could not be read; try again on its next signal.
        var snapshotMissing = false
        var queued: [BlueZEvent] = []

        public mutating func next() async -> BlueZEvent? {
            if !queued.isEmpty { return queued.removeFirst() }
            if !started {
                started = true
                if let current = await client.currentOwner() {
                    return await appeared(current)
                }
            }
            while let delivery = await deliveries.next() {
                switch delivery {
                case .lost(let count):
                    // Whatever the lost signals said, a fresh snapshot says it too.
                    if let owner { queued.append(await appeared(owner)) }
                    return .signalsLost(count)
                case .signal(let signal):
                    if signal.member == "NameOwnerChanged", signal.interface == "org.freedesktop.DBus" {
                        // Only the bus driver speaks for the bus (the bus checked it too).
                        guard signal.sender == "org.freedesktop.DBus", signal.signature == "sss" else { continue }
                        let newOwner = signal.body.count >= 3 ? (signal.body[2].string ?? "") : ""
                        // The owner we announced may reach us again as a buffered
                        // NameOwnerChanged from just before we asked for it.
                        if newOwner == owner { continue }
                        if owner != nil {
                            owner = nil
                            if !newOwner.isEmpty { queued.append(await appeared(newOwner)) }
                            return .serviceVanished
                        }
                        if !newOwner.isEmpty { return await appeared(newOwner) }
                        continue
                    }
                    guard let owner, signal.sender == owner else { continue }
                    if snapshotMissing, let tree = await client.snapshot(attempts: 1) {
                        snapshotMissing = false
                        return .serviceAppeared(owner: owner, tree: tree)
                    }
                    if let event = BlueZClient.event(from: signal) { return event }
                }
            }
            return nil
        }

        private mutating func appeared(_ newOwner: String) async -> BlueZEvent {
            owner = newOwner
            let tree = await client.snapshot(attempts: 5)
            snapshotMissing = tree == nil
            return .serviceAppeared(owner: newOwner, tree: tree ?? ObjectTree())
        }
    }
}
