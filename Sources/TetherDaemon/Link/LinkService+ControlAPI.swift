import BlueZ
import Configuration
import ControlAPI
import DBus
import DurationUnits
import EventLoop
import FoundationEssentials
import LinkPolicy
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import HCI
import LinkSupervisor
import Logging
import Readings
import Rfkill
import Synchronization
import ControllerDevice

/// The control API (`tether status`, `tether reconnect`): hops onto the loop.
extension LinkService {
    /// Drops the link (if any) and starts a fresh retry window, as `tether
    /// reconnect` asks. Returns once a connect attempt has started, when
    /// there is nothing to connect with (the supervisor says why), or after
    /// `limit` (an escalation step can hold the attempt back for seconds).
    public func reconnect(waitingUpTo limit: Duration = .seconds(20)) async -> ReconnectOutcome {
        await withCheckedContinuation { continuation in
            loop.execute { [self] in
                guard !shared.withLock({ $0.stopped }) else {
                    return continuation.resume(returning: .notReady("the daemon is stopping"))
                }
                requests.park(continuation, limit: limit) { [unowned self] in .pending(supervisor.state) }
                deliver(.reconnectRequested)
            }
        }
    }

    /// Calls `reply` from the loop, between two events: if it is not called,
    /// the loop is stuck (the watchdog then stops petting systemd).
    public func ping(_ reply: @escaping @Sendable () -> Void) {
        loop.execute(reply)
    }

    public var status: Status {
        let stats = recorder.stats
        let now = loop.now
        let sinceStart = start.duration(to: now)
        let wall = wallClock()
        /// A moment of the loop's clock, dated from the wall clock's reading now.
        func dated(_ instant: MonotonicInstant?) -> Date? {
            instant.map {
                wall.addingTimeInterval(-max(.zero, $0.duration(to: now)).inSeconds)
            }
        }
        return shared.withLock { s in
            #if DST_BUG_STATUS_WALL_AGES
            let connectedSince = s.connectedSinceWall
            #else
            let connectedSince = dated(s.connectedSince)
            #endif
            return Status(
                state: s.supervisor.state, device: s.device, adapter: s.adapter, connectedSince: connectedSince,
                lastReadingAt: dated(s.lastReadingAt), readingsWritten: stats.written,
                readingsPending: stats.pending, readingsDropped: stats.dropped,
                readingsError: stats.lastError, reconnects: s.supervisor.reconnects,
                windowAttempt: s.supervisor.windowAttempt,
                nextAttemptIn: s.supervisor.nextAttemptAt.map { max(.zero, $0 - sinceStart) },
                lastError: s.supervisor.lastError, silenceLimit: config.silenceLimit,
                silenceEvents: s.supervisor.silenceEvents, lastDisconnectReason: s.lastDisconnectReason,
                lastDisconnectAt: dated(s.lastDisconnectAt), adapterProblem: s.adapterProblem,
                bondProblem: s.supervisor.bondProblem,
                // A signalled property, sent when it changes: no running time in it.
                bluezProblem: s.bluezUnansweredSince.map { _ in
                    "bluetoothd owns org.bluez but does not answer (a D-Bus ping unanswered for \(BluezLiveness.pingTimeout.roundedText)): "
                        + "hung; Tether waits for it (the package's bluetooth.service drop-in has systemd restart a hang of 10 s; else `systemctl restart bluetooth`)"
                },
                awaySince: dated(s.awaySince), boundDongle: s.boundDongle, bootloader: s.bootloader,
                controller: s.controller
            )
        }
    }
}
