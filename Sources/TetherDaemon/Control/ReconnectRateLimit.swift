/// How often the control API's `Reconnect` may act: at most `burst` in any
/// `window`. A reconnect drops the link and starts a fresh retry window,
/// resetting the backoff and the cool-down, so callers without a bound
/// could keep the dongle from ever holding a link, or keep the radio busy
/// connecting; an operator needs a few in a row, not one a second.
///
/// A pure value: `now` is the caller's monotonic time, so tests drive it.
///
/// Invariant: `accepted` holds the times of the last accepted requests, at
/// most `burst` of them, oldest first.
public struct ReconnectRateLimit: Sendable, Equatable {
    public static let burst = 3
    public static let window: Duration = .seconds(30)

    public enum Decision: Sendable, Equatable {
        case accepted
        /// Refused; the next request would be accepted this much later.
        case refused(retryAfter: Duration)
    }

    private var accepted: [Duration] = []

    public init() {}

    /// Decides one request at `now` (a monotonic time), remembering it if accepted.
    public mutating func request(at now: Duration) -> Decision {
        accepted.removeAll { now - $0 >= Self.window }
        if accepted.count >= Self.burst, let oldest = accepted.first {
            return .refused(retryAfter: oldest + Self.window - now)
        }
        accepted.append(now)
        return .accepted
    }
}
