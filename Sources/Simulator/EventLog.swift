import DurationUnits
import EventLoop
import Foundation

/// The simulator's record of what happened: kept in memory for in-process
/// tests and, when a path is given, appended to a JSON-lines file as each
/// event happens (tests and the demo read it while the simulator runs). Its
/// timestamps are the simulator's loop's clock (virtual time on a virtual loop).
struct EventLog {
    /// In-memory events are capped so a long demo run at a high notify rate
    /// does not grow without bound; the oldest half goes when the cap is hit.
    static let memoryLimit = 500_000

    private let clock: EventLoopClock
    private let startedAt: MonotonicInstant
    private var file: FileHandle?
    private(set) var events: [SimulatorEvent] = []
    private let observer: (@Sendable (SimulatorEvent) -> Void)?
    private let keepsInMemory: Bool

    /// Times events from `clock.now` on.
    init(
        path: String?, clock: EventLoopClock, observer: (@Sendable (SimulatorEvent) -> Void)? = nil,
        keepsInMemory: Bool = true
    ) throws {
        self.clock = clock
        self.observer = observer
        self.keepsInMemory = keepsInMemory
        startedAt = clock.now
        guard let path else { return }
        // open(2) rather than FileManager.createFile, which on Linux writes
        // atomically and leaves a /tmp/TemporaryDirectory.* behind each time.
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SimulatorError.cannotOpenEventLog(path) }
        file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    /// Milliseconds since the simulator started, on its loop's clock.
    func timestamp() -> Double {
        let elapsed = startedAt.duration(to: clock.now)
        return elapsed.inSeconds * 1000
    }

    mutating func record(_ kind: SimulatorEvent.Kind, _ fill: (inout SimulatorEvent) -> Void = { _ in }) {
        var event = SimulatorEvent(t: timestamp(), ev: kind.rawValue)
        fill(&event)
        append(event)
    }

    /// Many notify events at once (one telemetry tick), in a single write.
    mutating func recordNotifications(_ sequences: [UInt32]) {
        let t = timestamp()
        var text = ""
        for sequence in sequences {
            let event = SimulatorEvent(t: t, ev: SimulatorEvent.Kind.notify.rawValue, seq: sequence)
            remember(event)
            if file != nil { text += event.jsonLine + "\n" }
        }
        write(text)
    }

    /// Notifications bluetoothd dropped by design, with why, in one write.
    mutating func recordDropped(_ dropped: [(sequence: UInt32, reason: String)]) {
        guard !dropped.isEmpty else { return }
        let t = timestamp()
        var text = ""
        for (sequence, reason) in dropped {
            let event = SimulatorEvent(t: t, ev: SimulatorEvent.Kind.notifyDropped.rawValue, seq: sequence, reason: reason)
            remember(event)
            if file != nil { text += event.jsonLine + "\n" }
        }
        write(text)
    }

    private mutating func append(_ event: SimulatorEvent) {
        remember(event)
        if file != nil { write(event.jsonLine + "\n") }
    }

    private mutating func remember(_ event: SimulatorEvent) {
        observer?(event)
        guard keepsInMemory else { return }
        if events.count >= Self.memoryLimit { events.removeFirst(Self.memoryLimit / 2) }
        events.append(event)
    }

    private mutating func write(_ text: String) {
        guard let file, !text.isEmpty else { return }
        do {
            try file.write(contentsOf: Data(text.utf8))
        } catch {
            // A full disk must not take the simulator down; stop writing.
            try? file.close()
            self.file = nil
        }
    }

    mutating func close() {
        try? file?.close()
        file = nil
    }
}
