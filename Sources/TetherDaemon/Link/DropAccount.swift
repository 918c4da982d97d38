import Pacing

/// How each drop and its reason reach the journal: in the order they
/// happened, each drop counted once.
///
/// A drop is logged the moment the supervisor reports it, with the state of
/// that moment. Its reason (the kernel's management socket, or BlueZ ≥
/// 5.83's `Device1.Disconnected`) arrives on another socket, milliseconds
/// before or after bluetoothd's `Connected=false`. Heard before, it is in the
/// drop's own line. Heard after, the drop's line says the reason is to
/// follow, and the reason follows as a line of its own within `wait`, after
/// whatever happened meanwhile: no line is held back, and none carries a
/// state that has passed. With no source at all, the drop's line says the
/// reason is unavailable and why; a first `Device1.Disconnected` that comes
/// within `wait` all the same still gets its line.
///
/// The metric and `tether status` take each drop once, with its final
/// reason (`.count`).
///
/// Invariants: at most one drop awaits its reason (a second drop ends the
/// first one's wait); every drop yields exactly one `.count`; a reason is
/// paired only with a drop of the same device within
/// `DisconnectReasons.pairing`. Pure: the link service feeds it its
/// monotonic time and carries out the effects on its loop.
struct DropAccount {
    /// How long a drop waits for a reason heard after it.
    static let wait: Duration = .seconds(1)

    enum Effect: Equatable {
        /// The drop's line: `reason` when known; nil with `toFollowFrom`
        /// naming the source whose answer is awaited, or with `why` when no
        /// source can say.
        case logDrop(unexpected: Bool, reason: DisconnectReasons.Reason?, toFollowFrom: String?, why: String?, device: String?)
        /// A reason (or `unavailable`, and `why`) for the drop logged at `droppedAt`.
        case logReason(DisconnectReasons.Reason, why: String?, droppedAt: Duration, device: String?)
        /// The drop's final reason, for the metric and status.
        case count(DisconnectReasons.Reason)
        case startWait(Duration)
        case cancelWait
    }

    private struct Awaiting {
        var droppedAt: Duration
        /// The dropped dongle's address: only its reason is this drop's.
        var address: String
        var device: String?
        /// The source whose reason is awaited; nil when none is known (the
        /// drop was logged as unavailable and counted only at the wait's end).
        var source: String?
    }

    private var heard = DisconnectReasons()
    private var awaiting: Awaiting?

    /// The supervisor reported a drop of the dongle at `address`.
    /// - Parameter source: who can say why (nil: nobody known to).
    /// - Parameter unavailableWhy: why no source can, for the line.
    mutating func dropNoticed(
        unexpected: Bool, address: String, device: String?, at now: Duration, source: String?, unavailableWhy: String
    ) -> [Effect] {
        var effects = endWait(why: "another drop came first")
        if let reason = heard.take(for: address, near: now) {
            effects += [.logDrop(unexpected: unexpected, reason: reason, toFollowFrom: nil, why: nil, device: device), .count(reason)]
            return effects
        }
        if let source {
            effects.append(.logDrop(unexpected: unexpected, reason: nil, toFollowFrom: source, why: nil, device: device))
        } else {
            effects.append(.logDrop(unexpected: unexpected, reason: .unavailable, toFollowFrom: nil, why: unavailableWhy, device: device))
        }
        awaiting = Awaiting(droppedAt: now, address: address, device: device, source: source)
        effects.append(.startWait(Self.wait))
        return effects
    }

    /// A source reported `reason` for the device at `address`.
    mutating func reasonHeard(_ reason: DisconnectReasons.Reason, address: String, at now: Duration) -> [Effect] {
        heard.heard(reason, address: address, at: now)
        guard let pending = awaiting, let reason = heard.take(for: pending.address, near: now) else { return [] }
        awaiting = nil
        return [.cancelWait, .logReason(reason, why: nil, droppedAt: pending.droppedAt, device: pending.device), .count(reason)]
    }

    /// `wait` passed with no reason for the drop awaiting one.
    mutating func waitEnded() -> [Effect] {
        guard let pending = awaiting else { return [] }
        let why = pending.source.map { "no reason from \($0) within \(Self.wait.roundedText)" }
        return endWait(why: why ?? "")
    }

    /// The daemon stops: a drop awaiting its reason gets none.
    mutating func stopping() -> [Effect] {
        endWait(why: "the daemon stopped before the kernel said why")
    }

    /// Ends the wait of the drop awaiting a reason: it is unavailable.
    private mutating func endWait(why: String) -> [Effect] {
        guard let pending = awaiting else { return [] }
        awaiting = nil
        // Logged as unavailable already when no source was known: only counted.
        guard pending.source != nil else { return [.cancelWait, .count(.unavailable)] }
        return [.cancelWait, .logReason(.unavailable, why: why, droppedAt: pending.droppedAt, device: pending.device), .count(.unavailable)]
    }
}
