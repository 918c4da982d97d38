/// Who owns each well-known bus name and who waits in line for it, by
/// dbus-daemon's rules (bus/services.c in dbus 1.14): `RequestName` with its
/// flags and replies, `ReleaseName`, and what a connection's end releases.
/// Pure decisions for `InProcessBusDaemon`, which sends the signals each
/// `Change` stands for. Connections are the daemon's ids for them.
///
/// Invariants:
/// - a name is here only while someone owns it: its queue is never empty,
///   and its first entry is the primary owner;
/// - a connection appears at most once in a name's queue;
/// - `namesByConnection` lists, for each connection, exactly the names whose
///   queues hold it, in the order it joined them (a connection's end
///   releases them last first, as dbus-daemon does).
struct BusNameRegistry {
    /// One connection's place in a name's queue, with the flags it asked with.
    struct Owner: Equatable {
        var connection: Int
        var allowsReplacement: Bool
        var doNotQueue: Bool

        init(connection: Int, flags: UInt32) {
            self.connection = connection
            allowsReplacement = flags & Flag.allowReplacement != 0
            doNotQueue = flags & Flag.doNotQueue != 0
        }
    }

    /// RequestName's flags (the D-Bus specification's values).
    enum Flag {
        static let allowReplacement: UInt32 = 0x1
        static let replaceExisting: UInt32 = 0x2
        static let doNotQueue: UInt32 = 0x4
    }

    /// RequestName's answers.
    enum RequestReply: UInt32 {
        case primaryOwner = 1, inQueue = 2, exists = 3, alreadyOwner = 4
    }

    /// ReleaseName's answers.
    enum ReleaseReply: UInt32 {
        case released = 1, nonExistent = 2, notOwner = 3
    }

    /// A name changing hands: the bus driver announces it with NameLost to
    /// the old owner, NameOwnerChanged to everyone, NameAcquired to the new
    /// one, in that order.
    struct Change: Equatable {
        var name: String
        var oldOwner: Int?
        var newOwner: Int?
    }

    private var queues: [String: [Owner]] = [:]
    private var namesByConnection: [Int: [String]] = [:]

    /// The primary owner of `name`, if anyone owns it.
    func owner(of name: String) -> Int? { queues[name]?.first?.connection }

    /// Every owned name.
    var names: Dictionary<String, [Owner]>.Keys { queues.keys }

    /// `RequestName(name, flags)` from `connection`; the name is valid and
    /// not unique or the driver's (the daemon checks that first).
    mutating func request(_ name: String, by connection: Int, flags: UInt32) -> (RequestReply, Change?) {
        let asking = Owner(connection: connection, flags: flags)
        guard let queue = queues[name], let primary = queue.first else {
            queues[name] = [asking]
            namesByConnection[connection, default: []].append(name)
            return (.primaryOwner, Change(name: name, oldOwner: nil, newOwner: connection))
        }
        if primary.connection == connection {
            queues[name]?[0] = asking
            return (.alreadyOwner, nil)
        }
        let replace = flags & Flag.replaceExisting != 0
        if asking.doNotQueue, !primary.allowsReplacement || !replace {
            // It cannot wait in line, so it leaves the line if it was in it.
            removeFromQueue(name, connection)
            return (.exists, nil)
        }
        if !replace || !primary.allowsReplacement {
            // Asking to replace puts it next in line, even where it must wait.
            enqueue(asking, for: name, second: replace)
            return (.inQueue, nil)
        }
        // Replace: in line right behind the primary owner, which then leaves
        // or, if it may wait, steps back behind it.
        enqueue(asking, for: name, second: true)
        if primary.doNotQueue {
            removeFromQueue(name, primary.connection)
        } else {
            queues[name]?.removeFirst()
            queues[name]?.insert(primary, at: 1)
        }
        return (.primaryOwner, Change(name: name, oldOwner: primary.connection, newOwner: connection))
    }

    /// `ReleaseName(name)` from `connection`.
    mutating func release(_ name: String, by connection: Int) -> (ReleaseReply, Change?) {
        guard let queue = queues[name] else { return (.nonExistent, nil) }
        guard queue.contains(where: { $0.connection == connection }) else { return (.notOwner, nil) }
        return (.released, remove(name, connection))
    }

    /// Everything `connection` owned or waited for, released as its end
    /// closes: the names it joined last first.
    mutating func removeConnection(_ connection: Int) -> [Change] {
        var changes: [Change] = []
        while let name = namesByConnection[connection]?.last {
            if let change = remove(name, connection) { changes.append(change) }
        }
        return changes
    }

    /// Takes `connection` out of `name`'s queue; the change of hands if it
    /// was the primary owner.
    private mutating func remove(_ name: String, _ connection: Int) -> Change? {
        let wasPrimary = owner(of: name) == connection
        removeFromQueue(name, connection)
        guard wasPrimary else { return nil }
        return Change(name: name, oldOwner: connection, newOwner: owner(of: name))
    }

    private mutating func enqueue(_ owner: Owner, for name: String, second: Bool) {
        if let index = queues[name]?.firstIndex(where: { $0.connection == owner.connection }) {
            // Already in line: new flags, and a replacing request moves it up.
            queues[name]?[index] = owner
            if second, index > 1, let moved = queues[name]?.remove(at: index) { queues[name]?.insert(moved, at: 1) }
            return
        }
        if second { queues[name]?.insert(owner, at: 1) } else { queues[name]?.append(owner) }
        namesByConnection[owner.connection, default: []].append(name)
    }

    private mutating func removeFromQueue(_ name: String, _ connection: Int) {
        guard let index = queues[name]?.firstIndex(where: { $0.connection == connection }) else { return }
        queues[name]?.remove(at: index)
        if queues[name]?.isEmpty == true { queues[name] = nil }
        if let position = namesByConnection[connection]?.lastIndex(of: name) {
            namesByConnection[connection]?.remove(at: position)
            if namesByConnection[connection]?.isEmpty == true { namesByConnection[connection] = nil }
        }
    }
}
