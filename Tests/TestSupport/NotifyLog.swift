/// The sd_notify messages a process has sent to a `DatagramReceiver`, each
/// with the time it was read at, counted from the log's start. What a test
/// of `READY=1`, `STATUS=` and the watchdog's pets reads.
public final class NotifyLog {
    public private(set) var messages: [(at: Duration, message: NotifyDatagram)] = []
    private let receiver: DatagramReceiver
    private let start: ContinuousClock.Instant

    /// Reads from `receiver`; times count from `start` (the process's start, say).
    public init(_ receiver: DatagramReceiver, since start: ContinuousClock.Instant = .now) {
        self.receiver = receiver
        self.start = start
    }

    /// Reads what has come until `done` holds for all the messages so far,
    /// for up to `timeout`; whether it came to hold.
    public func collect(timeout: Duration, until done: ([NotifyDatagram]) -> Bool) async -> Bool {
        await eventually(timeout: timeout) {
            while let datagram = try? receiver.receive() {
                messages.append((start.duration(to: .now), NotifyDatagram(datagram.payload)))
            }
            return done(messages.map(\.message))
        }
    }

    /// When each `WATCHDOG=1` was read.
    public var watchdogPets: [Duration] {
        messages.filter { $0.message["WATCHDOG"] == "1" }.map(\.at)
    }

    /// The time between one `WATCHDOG=1` and the next.
    public var watchdogGaps: [Duration] {
        let pets = watchdogPets
        return zip(pets.dropFirst(), pets).map { $0 - $1 }
    }
}
