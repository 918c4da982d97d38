import BlueZ
import Configuration
import ControlAPI
import DBus
import EventLoop
import Foundation
import Synchronization
import LinkSupervisor
import Logging
import Readings
import Rfkill
import Simulator
import TestSupport
import TetherDaemon

/// A private dbus-daemon, the simulator and the daemon's link service, all
/// in this process (the daemon on its own bus connection, as it would be),
/// in a temporary directory. `stop()` tears everything down.
final class DaemonHarness: @unchecked Sendable {
    let directory: TemporaryDirectory
    let busDaemon: BusDaemonProcess
    let simulator: Simulator
    var config: TetherConfig
    private(set) var recorder: ReadingRecorder?
    private(set) var service: LinkService?
    /// The daemon's wall clock: the real one moved by `wallOffset` (a
    /// clock step, as `date -s` makes).
    let wallOffset = WallOffset()
    final class WallOffset: Sendable {
        private let seconds = Mutex<TimeInterval>(0)
        func set(_ value: TimeInterval) { seconds.withLock { $0 = value } }
        var now: Date { Date().addingTimeInterval(seconds.withLock { $0 }) }
    }
    private var serviceTask: Task<Void, Never>?
    private var daemonBus: Bus?
    private var daemonLoop: EventLoop?
    private var publisher: Task<Void, Never>?
    private(set) var logLines = LogCapture()
    /// Log handlers added next to the capture (a journald handler, in the journald test).
    var extraLogHandlers: [@Sendable (String) -> any LogHandler] = []
    /// Where the daemon reads rfkill (nil: it does not; the machine's own
    /// switches are not the simulator's controller's).
    var rfkill: RfkillSource?
    /// What `tether run` would read with `pairing = "passkey-file"` (`loadPasskey`).
    var passkey: Passkey?
    /// The daemon's bus connection's unique name, once started.
    func daemonUniqueName() async -> String? { await daemonBus?.uniqueName }

    static let address = "AA:BB:CC:DD:EE:FF"

    /// - Parameter simulatedRfkill: the simulator serves its rfkill (in the
    ///   temporary directory) and the daemon reads it, as `tether run` does
    ///   with TETHER_RFKILL_DEVICE and TETHER_RFKILL_SYSFS.
    init(
        simulator options: SimulatorOptions = SimulatorOptions(), simulatedRfkill: Bool = false,
        configure: (inout TetherConfig) -> Void = { _ in }
    ) async throws {
        directory = try TemporaryDirectory("tether-it")
        busDaemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        var options = options
        if simulatedRfkill { options.rfkillDirectory = directory.url.appendingPathComponent("rfkill").path }
        if options.noAnswerTimeout == SimulatorOptions().noAnswerTimeout {
            options.noAnswerTimeout = .milliseconds(500)  // the kernel's 20 s, shortened for tests
        }
        options.eventLogPath = directory.url.appendingPathComponent("simulator.jsonl").path
        simulator = try await Simulator.start(busAddress: busDaemon.address, options: options)
        rfkill = simulator.rfkill
        var config = TetherConfig.defaults(address: Self.address)
        config.readings.directory = directory.url.appendingPathComponent("readings").path
        config.keepalive.interval = .seconds(1)
        config.keepalive.timeout = .milliseconds(800)
        config.keepalive.sleepAfter = .seconds(3)
        config.reconnect.initialBackoff = .milliseconds(200)
        config.reconnect.maxBackoff = .seconds(1)
        config.reconnect.connectTimeout = .seconds(2)
        config.reconnect.window = .seconds(10)
        config.reconnect.cooldown = .seconds(5)
        config.reconnect.escalate = []
        configure(&config)
        self.config = config
    }

    var readingsDirectory: String { config.readings.directory }
    var eventLogPath: String { directory.url.appendingPathComponent("simulator.jsonl").path }

    /// Starts the daemon's service in this process.
    func startDaemon() async throws {
        let log = try ReadingLog(
            directory: config.readings.directory, rotateSize: config.readings.rotateSize,
            retainSize: config.readings.retainSize
        )
        let recorder = ReadingRecorder(log: log, flushInterval: config.readings.flushInterval, maxBacklog: config.readings.maxBacklog) { _ in }
        // The daemon has an event loop of its own, as `tether run` does.
        let loop = EventLoop(name: "daemon-under-test")
        loop.moderation = LinkService.loadModeration
        daemonLoop = loop
        let bus = try await Bus.connect(address: busDaemon.address, on: loop)
        let capture = logLines
        let extra = extraLogHandlers
        let logger = Logger(label: "tether-test") { label in
            MultiplexLogHandler([CapturingLogHandler(capture: capture)] + extra.map { $0(label) })
        }
        // The simulated dongle is not the kernel's: its drops' reasons come
        // from the simulator (Device1.Disconnected) or nowhere, never from the
        // machine's own management socket.
        let service = LinkService(
            config: config, bus: bus, recorder: recorder, logger: logger, kernelReasons: false, rfkill: rfkill, seed: 7,
            passkey: passkey, wallClock: { [wallOffset] in wallOffset.now }
        )
        self.recorder = recorder
        self.service = service
        daemonBus = bus
        serviceTask = Task { try? await service.run() }
    }

    /// Serves the control interface for the running service, as the daemon
    /// does: exports the object, takes the bus name, publishes changes.
    func startControl(instance: InstanceName = .default) async throws -> ControlAddress {
        guard let bus = daemonBus, let service else { throw DBusError.disconnected }
        let address = ControlAddress(instance: instance)
        let control = ControlServer(bus: bus, address: address, link: service)
        try await control.export()
        try await bus.requestName(address.busName)
        publisher = Task {
            for await change in service.changes { await control.publish(change) }
        }
        return address
    }

    /// Stops the daemon's service and flushes its readings.
    func stopDaemon() async {
        publisher?.cancel()
        publisher = nil
        serviceTask?.cancel()
        await serviceTask?.value
        serviceTask = nil
        recorder?.close()
        await daemonBus?.close()
        daemonBus = nil
        daemonLoop?.stop()
        daemonLoop = nil
    }

    func stop() async {
        await stopDaemon()
        await simulator.stop()
        busDaemon.stop()
        directory.remove()
    }

    var state: SupervisorState? { service?.status.state }

    func waitForState(_ wanted: SupervisorState, within limit: Duration = .seconds(10)) async -> Bool {
        await eventually(timeout: limit) { self.state == wanted }
    }

    func events() -> [SimulatorEvent] {
        (try? SimulatorEvent.readLog(path: eventLogPath)) ?? []
    }

    func records() throws -> [ReadingRecord] {
        try ReadingLog.readRecords(directory: readingsDirectory)
    }

    /// Notification sequence numbers decoded from the readings on disk.
    func sequencesOnDisk() throws -> [UInt32] {
        try records().filter { $0.source == "notify" }.compactMap { record in
            guard let payload = record.payload, payload.count >= 4 else { return nil }
            return UInt32(payload[0]) | UInt32(payload[1]) << 8 | UInt32(payload[2]) << 16 | UInt32(payload[3]) << 24
        }
    }

    /// What a run left, read after the daemon stopped.
    struct Outcome {
        var events: [SimulatorEvent]
        var sent: [UInt32]
        var onDisk: [UInt32]
        var log: [String]
        var parts: ([SimulatorEvent], [UInt32], [UInt32], [String]) { (events, sent, onDisk, log) }
    }

    /// Stops the dongle's telemetry, lets what is in flight arrive for
    /// `settle`, stops the daemon (flushing its readings), collects the
    /// outcome and tears everything down.
    func quiesceAndStop(settle: Duration = .milliseconds(100)) async throws -> Outcome {
        await simulator.setNotifyRate(0)
        try await Task.sleep(for: settle)
        await stopDaemon()
        let outcome = Outcome(events: events(), sent: sequencesSent(), onDisk: try sequencesOnDisk(), log: logLines.all)
        await stop()
        return outcome
    }

    func sequencesSent() -> [UInt32] {
        events().filter { $0.ev == "notify" }.compactMap(\.seq)
    }

    struct NoDaemon: Error {}

    /// Streams at `rate` for `streaming`, then holds the daemon's loop for
    /// `hold` (nothing is read while notifications keep coming) and stops
    /// the daemon `after` into the hold; then ends the stream. Returns how
    /// many were sent before the stop, all that were sent, and what is on disk.
    func stopWhileTheLoopIsHeld(
        rate: Double, streaming: Duration, hold: Duration, after: Duration
    ) async throws -> (sentBeforeStop: Int, sent: [UInt32], onDisk: [UInt32]) {
        await simulator.setNotifyRate(rate)
        try await Task.sleep(for: streaming)
        guard let loop = service?.loop else { throw NoDaemon() }
        let microseconds = UInt32(hold / .microseconds(1))
        loop.execute { usleep(microseconds) }
        try await Task.sleep(for: after)
        let sentBeforeStop = sequencesSent().count
        await stopDaemon()
        await simulator.setNotifyRate(0)
        return (sentBeforeStop, sequencesSent(), try sequencesOnDisk())
    }
}

