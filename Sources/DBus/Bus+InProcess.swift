import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension Bus {
    /// Connects to an in-process model of the bus daemon and registers with
    /// Hello, as `connect(address:)` does with dbus-daemon. The bus runs on
    /// `loop`: the daemon's (the default), or another loop driven by the
    /// daemon's thread (a process of the deterministic simulation, each on a
    /// virtual loop of its own). `processID` is what the daemon answers
    /// GetConnectionUnixProcessID with for this connection (this process's by
    /// default). File descriptors cannot travel (`canPassUnixFDs` is false).
    public static func connect(
        to daemon: InProcessBusDaemon, on loop: EventLoop? = nil, processID: UInt32? = nil,
        timeout: Duration = defaultTimeout
    ) async throws(DBusError) -> Bus {
        let bus = Bus(loop: loop ?? daemon.loop)
        try await bus.open(inProcess: daemon, processID: processID ?? UInt32(getpid()), timeout: timeout)
        return bus
    }

    private func open(inProcess daemon: InProcessBusDaemon, processID: UInt32, timeout: Duration) async throws(DBusError) {
        try connection.open(inProcess: daemon, processID: processID)
        try await register(timeout: timeout)
    }
}
