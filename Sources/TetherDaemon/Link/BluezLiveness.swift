import EventLoop
import Pacing

/// Whether bluetoothd answers at all, asked only when a call to it went
/// unanswered.
///
/// A bluetoothd whose main loop hangs (a deadlock, a blocking call that never
/// returns) keeps its bus name, so nothing on the bus says it is gone: every
/// call just times out, notifications stop, and a keep-alive that no longer
/// reaches the dongle lets it fall asleep. From Tether's calls alone that
/// looks like radio trouble ("no connection within 20s"). A D-Bus ping
/// (`org.freedesktop.DBus.Peer.Ping`) tells the two apart: bluetoothd's D-Bus
/// library answers it from that main loop, with no radio or kernel work.
///
/// Invariants:
/// - at most one ping is in flight; none is sent while bluetoothd answers and
///   no call went unanswered (an idle daemon sends none);
/// - while bluetoothd does not answer, it is asked again after the
///   last ping ended (`recheck`: 5 s doubling to 10 s), and at once when it sends
///   anything, so its return is seen within that;
/// - `changed` runs once per change of the verdict, never for a ping that a
///   `reset` (bluetoothd left or came back on the bus) made stale.
///
/// Threading: confined to the service's loop, like the service.
final class BluezLiveness {
    /// How long a ping may go unanswered before bluetoothd counts as hung:
    /// its main loop answers in microseconds when it runs at all, and a busy
    /// one (a controller being reset, an emulated machine) within a second.
    /// Short, so that the verdict comes before the keep-alive's next failure
    /// (shipped: 5 s apart, 3 s timeout) makes the supervisor send a
    /// Disconnect into the hung bluetoothd, which it would act on when it
    /// resumes, dropping the notifications it still holds (`make e2e`'s
    /// bluetoothd-hang at 5 s: 77 of them).
    static let pingTimeout: Duration = .seconds(3)
    /// 5 s, doubling to 10 s: low, because a dongle left without
    /// keep-alives sleeps for good, so its bluetoothd's return must be seen
    /// soon; a ping costs nothing.
    static let recheck = Backoff(first: .seconds(5), cap: .seconds(10))

    /// Since when bluetoothd has not answered (nil: it answers).
    private(set) var unansweredSince: MonotonicInstant?
    private var inFlight = false
    private var unansweredPings = 0
    private var timer: EventLoop.TimerID?
    /// Bumped by `reset`: a ping sent before reports nothing.
    private var generation = 0
    private let loop: EventLoop
    /// Sends one ping; calls back on the loop with whether it was answered
    /// (any reply, an error too, is an answer; only a timeout is not).
    private let ping: (Duration, @escaping (Bool) -> Void) -> Void
    private let changed: (_ unansweredSince: MonotonicInstant?) -> Void

    init(
        loop: EventLoop, ping: @escaping (Duration, @escaping (Bool) -> Void) -> Void,
        changed: @escaping (_ unansweredSince: MonotonicInstant?) -> Void
    ) {
        self.loop = loop
        self.ping = ping
        self.changed = changed
    }

    /// A call to bluetoothd got no reply within its timeout.
    func callUnanswered() {
        guard unansweredSince == nil, !inFlight else { return }
        send()
    }

    /// bluetoothd sent something (a signal) while it counted as hung: it
    /// runs again, so it is asked now rather than at the next recheck.
    func heardFrom() {
        guard unansweredSince != nil, !inFlight else { return }
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        send()
    }

    /// bluetoothd left the bus or a new one took its name: what was asked
    /// of the old one no longer counts. The caller re-reads the verdict.
    func reset() {
        generation += 1
        inFlight = false
        unansweredPings = 0
        unansweredSince = nil
        if let timer { loop.cancelTimer(timer) }
        timer = nil
    }

    private func send() {
        inFlight = true
        let sent = generation
        let started = loop.now
        ping(Self.pingTimeout) { [self] answered in
            guard sent == generation else { return }
            inFlight = false
            if answered {
                unansweredPings = 0
                guard unansweredSince != nil else { return }
                unansweredSince = nil
                changed(nil)
            } else {
                unansweredPings += 1
                let delay = Self.recheck.delay(afterFailures: unansweredPings - 1)
                timer = loop.schedule(after: delay) { [self] in
                    timer = nil
                    send()
                }
                guard unansweredSince == nil else { return }
                unansweredSince = started
                changed(started)
            }
        }
    }
}
