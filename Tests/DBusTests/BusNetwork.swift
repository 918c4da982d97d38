import DBus
import Synchronization
import TestSupport
import Testing

/// Where a test's buses meet: a private dbus-daemon, or the in-process model
/// of it. The tests that run on both hold the model to dbus-daemon's word.
enum BusBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case dbusDaemon, inProcess
    var testDescription: String { rawValue }
}

/// The bus of one test and the connections made to it.
final class BusNetwork: Sendable {
    let backend: BusBackend
    let model: InProcessBusDaemon?
    private let process: BusDaemonProcess?
    private let directory: TemporaryDirectory?

    init(_ backend: BusBackend) throws {
        self.backend = backend
        switch backend {
        case .dbusDaemon:
            let directory = try TemporaryDirectory("dbus-network")
            self.directory = directory
            process = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
            model = nil
        case .inProcess:
            directory = nil
            process = nil
            model = InProcessBusDaemon(loop: .shared)
        }
    }

    func connect() async throws -> Bus {
        if let model { return try await Bus.connect(to: model) }
        guard let process else { throw DBusError.disconnected }
        return try await Bus.connect(address: process.address)
    }

    func connect(_ count: Int) async throws -> [Bus] {
        var buses: [Bus] = []
        for _ in 0..<count { buses.append(try await connect()) }
        return buses
    }

    /// Ends `bus`'s connection as its process dying would: the model drops
    /// it from the daemon's side; over dbus-daemon the connection closes,
    /// which is the hang-up dbus-daemon sees either way.
    func kill(_ bus: Bus) async {
        if let model {
            await model.disconnect(await bus.uniqueName)
        } else {
            await bus.close()
        }
    }

    /// The whole bus goes down, as when the system bus restarts.
    func stopBus() async {
        if let model { await model.restart() } else { process?.stop() }
    }

    /// Runs `body` with `count` connections, then closes them and the bus.
    static func with(
        _ backend: BusBackend, _ count: Int, _ body: (BusNetwork, [Bus]) async throws -> Void
    ) async throws {
        let network = try BusNetwork(backend)
        let buses = try await network.connect(count)
        do {
            try await body(network, buses)
        } catch {
            await network.tearDown(buses)
            throw error
        }
        await network.tearDown(buses)
    }

    func tearDown(_ buses: [Bus]) async {
        for bus in buses { await bus.close() }
        process?.stop()
        directory?.remove()
    }
}

/// What a connection received, before its match rules were applied: the
/// members of every signal its interceptor saw.
final class SignalsSeen: Sendable {
    private let members = Mutex<[String]>([])
    private let watched: [String]

    init(watching members: [String]) { watched = members }

    /// Installs the recorder on `bus`; it consumes nothing.
    func install(on bus: Bus) async {
        await bus.setSignalInterceptor { [self] signal in
            for member in watched where signal.hasMember(member) { members.withLock { $0.append(member) } }
            return false
        }
    }

    var seen: [String] { members.withLock { $0 } }
}

/// A method handler that waits until the test lets it go, and says when it
/// has started.
final class HeldCall: Sendable {
    private let release: AsyncStream<Void>
    private let releaser: AsyncStream<Void>.Continuation
    let started: AsyncStream<Void>
    private let starter: AsyncStream<Void>.Continuation

    init() {
        let (release, releaser) = AsyncStream<Void>.makeStream()
        let (started, starter) = AsyncStream<Void>.makeStream()
        self.release = release
        self.releaser = releaser
        self.started = started
        self.starter = starter
    }

    var method: ExportedInterface.Method {
        .init { [self] _ in
            starter.yield()
            for await _ in release {}
            return []
        }
    }

    func letGo() { releaser.finish() }
}

/// `org.example.Echo` at /org/example: `Echo` answers with its argument,
/// `Fail` with a BlueZ error, `Hold` when `held` lets it go.
func exportEcho(on bus: Bus, held: HeldCall = HeldCall()) async throws {
    try await bus.export("/org/example", [
        ExportedInterface(name: "org.example.Echo", methods: [
            "Echo": .init(in: "v", out: "v") { call in [try call.argument(0)] },
            "Fail": .init { _ in
                throw DBusError.remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
            },
            "Hold": held.method,
        ])
    ])
}
