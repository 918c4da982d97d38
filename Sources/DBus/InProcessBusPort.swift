import CDBus
import EventLoop

/// One connection to an `InProcessBusDaemon`: what the socket between a
/// client and dbus-daemon is, both ends of it.
///
/// The client's `Connection` sends through it: the serial is set here, as
/// libdbus sets it in `dbus_connection_send`, and the daemon routes the
/// message at once. What the daemon writes to the client waits in `unread`
/// until the loop hands it over, in order, in a later piece of work: never
/// inside the send that caused it, as a socket's reader never runs inside
/// its writer.
///
/// Threading: the client's end runs on the client's loop, the daemon's on
/// the daemon's; both loops are driven by one thread (the same loop, or
/// virtual loops driven together), so nothing here is touched by two
/// threads; `@unchecked Sendable` only so that the loops' work items can
/// hold it.
///
/// Invariants:
/// - every message in `unread` holds one reference, released once the client
///   has read it or it is dropped;
/// - a message is never changed once the daemon has routed it (the daemon
///   stamps the sender, then locks it), so a broadcast shares one message;
/// - after the daemon closes its end, the client reads what was written
///   before, then libdbus's own `Disconnected` signal (no sender, so no peer
///   can forge it), as from a socket its peer closed; what it sends meanwhile
///   is lost, as on such a socket;
/// - after the client closes its end, nothing more is read and what was
///   unread is dropped.
final class InProcessBusPort: @unchecked Sendable {
    let daemon: InProcessBusDaemon
    /// The daemon's number for this connection, in connection order.
    let id: Int
    /// Weak: the client's `Bus` owns its connection, and a client that goes
    /// away without closing is a process that died.
    private weak var client: Connection?
    /// Where the client reads (its connection's loop), and whether that is
    /// the daemon's own: then a send is routed at once; else the daemon
    /// reads it in a later piece of work on its loop, as from a socket.
    private let clientLoop: EventLoop
    private let sharesDaemonLoop: Bool
    private var nextSerial: UInt32 = 1
    private var unread: [OpaquePointer] = []
    private var readIndex = 0
    private var readScheduled = false
    /// The daemon closed its end: after `unread`, the client reads the hang-up.
    private var hangUpUnread = false
    private(set) var daemonEndOpen = true
    private(set) var clientEndOpen = true

    init(daemon: InProcessBusDaemon, id: Int, client: Connection) {
        self.daemon = daemon
        self.id = id
        self.client = client
        clientLoop = client.loop
        sharesDaemonLoop = client.loop === daemon.loop
    }

    deinit {
        for message in unread[readIndex...] { dbus_message_unref(message) }
    }

    // MARK: The client's end

    /// Sends `message` to the daemon with the next serial, and returns it.
    /// libdbus sets a serial only on an unlocked message: a message sent
    /// before (locked, with a serial) goes as a copy.
    func send(_ message: OutgoingMessage) throws(DBusError) -> UInt32 {
        let raw: OpaquePointer
        if dbus_message_get_serial(message.raw) == 0 {
            raw = dbus_message_ref(message.raw)
        } else {
            guard let copy = dbus_message_copy(message.raw) else { throw .outOfMemory }
            raw = copy
        }
        defer { dbus_message_unref(raw) }
        let serial = nextSerial
        nextSerial = serial == .max ? 1 : serial + 1
        dbus_message_set_serial(raw, serial)
        if daemonEndOpen {
            if sharesDaemonLoop {
                nonisolated(unsafe) let sent = raw
                daemon.assumeIsolated { $0.route(sent, from: self) }
            } else {
                dbus_message_ref(raw)
                nonisolated(unsafe) let sent = raw
                daemon.loop.execute { [self] in
                    if daemonEndOpen { daemon.assumeIsolated { $0.route(sent, from: self) } }
                    dbus_message_unref(sent)
                }
            }
        }
        return serial
    }

    /// The client closed its connection: the daemon sees the hang-up now.
    func clientClosed() {
        guard clientEndOpen else { return }
        clientEndOpen = false
        if sharesDaemonLoop {
            daemonSeesHangUp()
        } else {
            // After what the client sent before closing, as a socket's
            // reader gets the data before the end of file.
            daemon.loop.execute { [self] in daemonSeesHangUp() }
        }
        scheduleRead()
    }

    private func daemonSeesHangUp() {
        guard daemonEndOpen else { return }
        daemonEndOpen = false
        daemon.assumeIsolated { $0.hungUp(self) }
    }

    // MARK: The daemon's end

    /// Queues `message` (stamped and locked) for the client to read.
    func write(_ message: OpaquePointer) {
        guard clientEndOpen else { return }
        unread.append(dbus_message_ref(message))
        scheduleRead()
    }

    /// The daemon closed its end (`disconnect`, a stop): the client reads
    /// what is queued, then the hang-up.
    func daemonClosed() {
        guard daemonEndOpen else { return }
        daemonEndOpen = false
        guard clientEndOpen else { return }
        hangUpUnread = true
        scheduleRead()
    }

    // MARK: Reading

    private func scheduleRead() {
        guard !readScheduled else { return }
        readScheduled = true
        clientLoop.execute { [self] in readUnread() }
    }

    /// Hands the client what is queued, in order: a bounded batch per turn,
    /// as a connection dispatches, so that other work on the loop runs
    /// under a flood.
    private func readUnread() {
        readScheduled = false
        var read = 0
        while readIndex < unread.count, read < 512, clientEndOpen, let client {
            let message = unread[readIndex]
            readIndex += 1
            read += 1
            client.receive(inProcess: message)
            dbus_message_unref(message)
        }
        if !clientEndOpen || client == nil {
            for message in unread[readIndex...] { dbus_message_unref(message) }
            let lost = unread.count - readIndex
            unread.removeAll()
            readIndex = 0
            daemon.assumeIsolated { $0.noteRead(read, lost: lost) }
            return
        }
        if readIndex == unread.count {
            unread.removeAll(keepingCapacity: true)
            readIndex = 0
            if hangUpUnread { readHangUp() }
        } else {
            scheduleRead()
        }
        daemon.assumeIsolated { $0.noteRead(read, lost: 0) }
    }

    /// libdbus's own `Disconnected` signal, as it makes one when the socket
    /// closes: no sender, so no peer can forge it.
    private func readHangUp() {
        hangUpUnread = false
        guard clientEndOpen, let client,
              let hangUp = dbus_message_new_signal("/org/freedesktop/DBus/Local", "org.freedesktop.DBus.Local", "Disconnected")
        else { return }
        client.receive(inProcess: hangUp)
        dbus_message_unref(hangUp)
    }
}
