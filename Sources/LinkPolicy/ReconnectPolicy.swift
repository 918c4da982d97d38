import Pacing

/// When to try connecting again after the link is lost: the `[reconnect]` keys.
///
/// A retry window opens at the drop (or when the dongle is seen again). Its
/// first attempt comes after `firstDelay`; each later one after an
/// exponential backoff, `initialBackoff` doubling up to `maxBackoff`, spread
/// by ±`jitter` so that several gateways do not retry in lock step. The
/// window is exhausted after `windowAttempts` attempts or once `window` has
/// passed, whichever comes first. With the defaults (0 s, 1 s … 30 s, 180 s,
/// 12 attempts) the dense part of the window falls inside the ~180 s a
/// Nordic dongle advertises after a drop.
public struct ReconnectPolicy: Sendable, Equatable {
    public var firstDelay: Duration
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    /// Fraction in [0, 1): a backoff `b` becomes a value in [b·(1−jitter), b·(1+jitter)].
    public var jitter: Double
    public var connectTimeout: Duration
    public var window: Duration
    public var windowAttempts: Int
    public var cooldown: Duration

    public init(
        firstDelay: Duration = .zero, initialBackoff: Duration = .seconds(1), maxBackoff: Duration = .seconds(30),
        jitter: Double = 0.2, connectTimeout: Duration = .seconds(20), window: Duration = .seconds(180),
        windowAttempts: Int = 12, cooldown: Duration = .seconds(300)
    ) {
        self.firstDelay = firstDelay
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.jitter = jitter
        self.connectTimeout = connectTimeout
        self.window = window
        self.windowAttempts = windowAttempts
        self.cooldown = cooldown
    }

    /// The pace of a window's attempts after its second.
    public var backoff: Backoff { Backoff(first: initialBackoff, cap: maxBackoff) }

    /// The un-jittered delay before attempt `n` (1-based) of a window.
    public func baseDelay(beforeAttempt n: Int) -> Duration {
        guard n > 1 else { return firstDelay }
        // initialBackoff · 2^(n−2), at most maxBackoff.
        return backoff.delay(afterFailures: n - 2)
    }

    /// The delay before attempt `n`, jittered with `unit`, a value in [0, 1).
    /// The first attempt is never jittered: it comes at once (or after
    /// `firstDelay`) because the dongle is most likely still advertising.
    public func delay(beforeAttempt n: Int, unit: Double) -> Duration {
        let base = baseDelay(beforeAttempt: n)
        guard n > 1 else { return base }
        return Backoff.jittered(base, by: jitter, unit: unit)
    }

    /// Whether a window that opened at `start` has room for another attempt
    /// at `time`, having made `attempts` so far.
    public func windowAllows(attempt attempts: Int, at time: Duration, windowStart start: Duration) -> Bool {
        #if DST_BUG_WINDOW_WITHOUT_ATTEMPT_BOUND  // planted bug (make dst-selftest)
        time - start < window
        #else
        attempts < windowAttempts && time - start < window
        #endif
    }
}
