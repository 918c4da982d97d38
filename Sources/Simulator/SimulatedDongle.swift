import EventLoop
import Foundation
import Pacing

/// The dongle's firmware state, free of any D-Bus concern: connection state,
/// the notification sequence, injected connect failures, idle tracking and
/// the values it produces (telemetry payloads, RSSI, battery level). The
/// `Simulator` actor drives it and turns its transitions into bus traffic.
/// It reads no clock: the instants it is given are the simulator's loop's.
struct SimulatedDongle: Sendable {
    struct InjectedFailure: Sendable, Equatable {
        var errorName: String
        var message: String
    }

    private(set) var state: DongleState = .advertising
    /// The last sequence number sent; 0 before the first notification.
    private(set) var sequence: UInt32 = 0
    /// Successful connects since the simulator started.
    private(set) var connects: UInt32 = 0
    /// The last GATT read or write (or the connect): the idle clock's origin.
    private(set) var lastActivity: MonotonicInstant
    private var pendingFailures = 0
    private var failure = InjectedFailure(errorName: "", message: "")
    private var rssi: Int16 = -62
    private var rng = SplitMix64(seed: 0x7e7_4e2)

    init(now: MonotonicInstant) {
        lastActivity = now
    }

    // MARK: Connections

    /// Makes the next `count` connects fail with the given error (0 clears it).
    mutating func failNextConnects(_ count: Int, errorName: String, message: String) {
        pendingFailures = max(0, count)
        failure = InjectedFailure(errorName: errorName, message: message)
    }

    /// Consumes one injected failure, if any is left.
    mutating func takeInjectedFailure() -> InjectedFailure? {
        guard pendingFailures > 0 else { return nil }
        pendingFailures -= 1
        return failure
    }

    /// Whether a connect attempt now can reach the dongle: only while it advertises.
    var acceptsConnection: Bool { state == .advertising }

    mutating func linkUp(at now: MonotonicInstant) {
        state = .connected
        connects += 1
        lastActivity = now
    }

    /// The link is gone: the firmware either restarts advertising or, when the
    /// drop was its own idle timeout, powers off.
    mutating func linkDown(asleep: Bool) {
        state = asleep ? .asleep : .advertising
    }

    /// A GATT read or write from the central resets the idle clock.
    mutating func noteActivity(at now: MonotonicInstant) {
        lastActivity = now
    }

    /// When the link drops for idleness, measured from the last activity.
    func idleDeadline(sleepAfter: Duration) -> MonotonicInstant {
        lastActivity + sleepAfter
    }

    /// Advertising timed out or the sleep knob was used while not connected.
    mutating func fallAsleep() {
        if state == .advertising { state = .asleep }
    }

    /// The physical wake: returns whether the dongle was asleep.
    mutating func wake() -> Bool {
        guard state == .asleep else { return false }
        state = .advertising
        return true
    }

    // MARK: Values

    /// The next telemetry notification: UInt32 little-endian sequence number
    /// (from 1, never reused within a run), then 4 bytes of fake telemetry:
    /// temperature in 0.01 °C (Int16 LE) and relative humidity in 0.01 %
    /// (UInt16 LE), both drifting slowly with the sequence.
    mutating func nextNotification() -> (sequence: UInt32, payload: [UInt8]) {
        // Wrapping would take 2^32 notifications (~10 days at 5000/s).
        sequence &+= 1
        let phase = Double(sequence % 3600) / 3600 * 2 * Double.pi
        let temperature = Int16(2150 + 150 * sin(phase))
        let humidity = UInt16(4500 + 500 * cos(phase))
        var payload: [UInt8] = []
        payload.reserveCapacity(8)
        withUnsafeBytes(of: sequence.littleEndian) { payload.append(contentsOf: $0) }
        withUnsafeBytes(of: temperature.littleEndian) { payload.append(contentsOf: $0) }
        withUnsafeBytes(of: humidity.littleEndian) { payload.append(contentsOf: $0) }
        return (sequence, payload)
    }

    /// The RSSI of the next advertisement seen: a bounded random walk, like a
    /// dongle on a desk a few metres away.
    mutating func nextRSSI() -> Int16 {
        let step = Int16(truncatingIfNeeded: Int(rng.next() % 7)) - 3
        rssi = min(-40, max(-90, rssi + step))
        return rssi
    }

    /// Battery level in percent, sagging one point per ten connects.
    var batteryLevel: UInt8 {
        UInt8(max(5, 97 - Int(connects / 10)))
    }
}
