import EventLoop
import Foundation
import Rfkill
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The simulator's `/dev/rfkill`: a `SOCK_SEQPACKET` Unix socket at
/// `DIR/rfkill` and a sysfs class directory `DIR/class-rfkill` whose
/// `rfkillN/name` names each switch's controller, as the kernel's are.
/// `RfkillDevice` connects to such a socket when its path is one.
///
/// What it does as the kernel's device does: every client that connects is
/// sent an ADD record per switch (what an open of `/dev/rfkill` reads
/// first), then every change as a CHANGE record (DEL when a switch goes),
/// one 8-byte datagram each; a record a client writes is handed to
/// `onWrite` (the simulator applies an `RFKILL_OP_CHANGE` as the kernel
/// would, and the CHANGE that follows comes back to every client).
///
/// Invariants:
/// - a switch's name is on disk before its ADD record leaves;
/// - every client sees the switches' states in the order they changed
///   (updates and accepts run on one loop, in the order submitted).
///
/// Threading: everything but `start` and `stop` runs on `loop`; the
/// simulator submits updates with `update(_:)`, which hops onto it.
final class RfkillServer: @unchecked Sendable {
    // @unchecked: the mutable state is touched on `loop` only.

    let socketPath: String
    let sysfs: String
    private let loop: EventLoop
    private let listener: Int32
    private let onWrite: @Sendable (RfkillEvent) -> Void
    private var listenWatch: EventLoop.WatchID?
    private var clients: [Int32: EventLoop.WatchID] = [:]
    /// The switches now, by index: what a new client is told.
    private var switches: [UInt32: RfkillEvent] = [:]
    private var closed = false

    private init(directory: String, loop: EventLoop, listener: Int32, onWrite: @escaping @Sendable (RfkillEvent) -> Void) {
        socketPath = directory + "/rfkill"
        sysfs = directory + "/class-rfkill"
        self.loop = loop
        self.listener = listener
        self.onWrite = onWrite
    }

    /// Binds the socket (replacing a stale one) and starts accepting.
    static func start(
        directory: String, loop: EventLoop, onWrite: @escaping @Sendable (RfkillEvent) -> Void
    ) throws -> RfkillServer {
        try FileManager.default.createDirectory(atPath: directory + "/class-rfkill", withIntermediateDirectories: true)
        let path = directory + "/rfkill"
        unlink(path)
        let listener = try listeningSocket(path)
        let server = RfkillServer(directory: directory, loop: loop, listener: listener, onWrite: onWrite)
        loop.execute { server.listenWatch = loop.watch(listener, interest: .readable) { _ in server.acceptClients() } }
        return server
    }

    /// A switch appears (ADD), changes (CHANGE) or goes (DEL), as `event`
    /// says; `name` is written for an ADD.
    func update(_ event: RfkillEvent, name: String? = nil) {
        loop.execute { [self] in
            guard !closed else { return }
            let directory = "\(sysfs)/rfkill\(event.index)"
            switch event.operation {
            case .add:
                try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                try? ((name ?? "") + "\n").write(toFile: directory + "/name", atomically: false, encoding: .utf8)
                switches[event.index] = event
            case .change:
                guard switches[event.index] != nil else { return }
                switches[event.index] = event
            case .delete:
                guard switches.removeValue(forKey: event.index) != nil else { return }
                try? FileManager.default.removeItem(atPath: directory)
            case .changeAll:
                return
            }
            for client in clients.keys.sorted() { send(event, to: client) }
        }
    }

    /// Closes every client and the listener, and removes the socket file.
    func stop() {
        loop.execute { [self] in
            guard !closed else { return }
            closed = true
            if let listenWatch { loop.removeWatch(listenWatch) }
            listenWatch = nil
            systemClose(listener)
            for client in clients.keys.sorted() { drop(client) }
            unlink(socketPath)
        }
    }

    // MARK: On the loop

    private func acceptClients() {
        while !closed {
            // accept(2), then the flags accept4 would set (glibc declares
            // accept4 only for _GNU_SOURCE).
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            clients[client] = loop.watch(client, interest: .readable) { [unowned self] _ in readClient(client) }
            // What an open of /dev/rfkill reads first: one ADD per switch.
            for entry in switches.keys.sorted() {
                guard var event = switches[entry] else { continue }
                event.operation = .add
                send(event, to: client)
            }
        }
    }

    private func readClient(_ client: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64)
        while clients[client] != nil {
            let count = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            // A writer that closed with our ADD records unread leaves
            // ECONNRESET, reported once before the record it wrote.
            if count < 0, errno == EINTR || errno == ECONNRESET { continue }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK { return }
            guard count > 0 else { return drop(client) }
            // The kernel takes the first 8 bytes of a longer record (newer
            // struct rfkill_event) and refuses a shorter one.
            if let event = RfkillEvent(bytes: buffer.prefix(count)) { onWrite(event) }
        }
    }

    private func send(_ event: RfkillEvent, to client: Int32) {
        let bytes = event.bytes
        let sent = bytes.withUnsafeBytes { systemSend(client, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) }
        // A client that does not read is not waited for (the kernel queues a
        // few events per reader and drops the rest). One that is gone is
        // dropped by `readClient` at its end of file, after what it wrote
        // before closing (a writer's unblock) has been read.
        _ = sent
    }

    private func drop(_ client: Int32) {
        guard let watch = clients.removeValue(forKey: client) else { return }
        loop.removeWatch(watch)
        systemClose(client)
    }

    private static func listeningSocket(_ path: String) throws -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw SimulatorError.invalidPath(path) }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        #if canImport(Glibc)
        // glibc declares the socket types in an enum, musl as plain integers.
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        #else
        let type = SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC
        #endif
        let fd = socket(AF_UNIX, type, 0)
        guard fd >= 0 else { throw SimulatorError.cannotServeRfkill(path, errno) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = errno
            systemClose(fd)
            throw SimulatorError.cannotServeRfkill(path, error)
        }
        return fd
    }
}

// The C calls under names the methods above do not hide.
private func systemClose(_ descriptor: Int32) { _ = close(descriptor) }
private func systemSend(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int, _ flags: Int32) -> Int {
    send(fd, buffer, count, flags)
}
