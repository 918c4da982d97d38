import ControlAPI
import DBus
import EventLoop
import LinkSupervisor
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Serves `io.tether.Tether1` for one link on the daemon's bus connection.
///
/// Methods:
/// - `Reconnect() → u`: drops the link and starts a fresh retry window;
///   returns once the first attempt has started, with its number in the
///   window (0 if an escalation step or a forced disconnect is still holding
///   it back). Fails with `io.tether.Tether1.Error.NotReady` when bluetoothd
///   or the adapter is missing.
///
/// - `Rebind() → s`: forgets the dongle this gateway is bound to (a config
///   that finds it by `name_prefix` or `service_uuid` binds it on its first
///   link), then reconnects as `Reconnect` does; returns what was forgotten.
///   `io.tether.Tether1.Error.NotBound` when the config names the address.
///   Rate-limited with `Reconnect`.
///
/// Properties (read-only): see `LinkStatus`. `ReadingsWritten` and
/// `LastReadingAt` change with every reading, so they are computed on each
/// Get and never signalled; the others are announced with PropertiesChanged.
///
/// Signal `StateChanged(s from, s to, s cause)` on every state transition.
///
/// Callers are bounded: dbus-daemon's policy lets only root and the operator
/// group call `Reconnect`, the bus serves each caller at most
/// `Bus.defaultCallsInFlightPerCaller` calls at once, and `Reconnect` acts at most
/// `ReconnectRateLimit.burst` times in any `ReconnectRateLimit.window`
/// (whoever asks): past that it fails with
/// `io.tether.Tether1.Error.RateLimited` at once.
public struct ControlServer: Sendable {
    public let address: ControlAddress
    private let bus: Bus
    private let link: any ControlledLink
    private let rateLimit: RateLimitState
    /// CLOCK_MONOTONIC as a duration since boot; injected for tests.
    private let now: @Sendable () -> Duration

    public init(
        bus: Bus, address: ControlAddress, link: any ControlledLink,
        now: @escaping @Sendable () -> Duration = { .nanoseconds(Int64(clamping: MonotonicInstant.now.nanoseconds)) }
    ) {
        self.bus = bus
        self.address = address
        self.link = link
        self.now = now
        rateLimit = RateLimitState()
    }

    private final class RateLimitState: Sendable {
        let limit = Mutex(ReconnectRateLimit())
    }

    /// Exports the object. The caller takes the bus name afterwards, so that
    /// a client that sees the name can already call the object.
    public func export() async throws(DBusError) {
        let link = link
        let rateLimit = rateLimit
        let now = now
        /// Reconnect and Rebind share one budget: each drops the link.
        @Sendable func admit(_ what: String) throws(DBusError) {
            let decision = rateLimit.limit.withLock { $0.request(at: now()) }
            if case .refused(let wait) = decision {
                throw DBusError.remote(
                    name: ControlErrorName.rateLimited,
                    message: "cannot \(what) now: \(ReconnectRateLimit.burst) reconnects were asked for in the last "
                        + "\(ReconnectRateLimit.window.components.seconds) s; try again in \(wait.roundedUpSeconds) s"
                )
            }
        }
        let interface = ExportedInterface(
            name: ControlAddress.interface,
            methods: [
                "Rebind": .init(out: "s") { _ in
                    try admit("rebind")
                    switch await link.rebind(waitingUpTo: .seconds(20)) {
                    case .fixedByConfig(let address):
                        throw DBusError.remote(
                            name: ControlErrorName.notBound,
                            message: "nothing to rebind: the config names the dongle's address (\(address)); change dongle.address to change it")
                    case .failed(let why):
                        throw DBusError.remote(name: ControlErrorName.failed, message: "cannot rebind: \(why)")
                    case .forgotten(let was, let reconnect):
                        let forgotten = was.map { "forgot the binding to \($0)" } ?? "no dongle was bound"
                        switch reconnect {
                        case .started(let attempt): return [.string("\(forgotten); reconnecting: attempt \(attempt) started")]
                        case .pending(let state): return [.string("\(forgotten); a reconnect is asked for (now \(state.rawValue))")]
                        case .notReady(let why): return [.string("\(forgotten); not reconnecting now: \(why)")]
                        }
                    }
                },
                "Reconnect": .init(out: "u") { _ in
                    try admit("reconnect")
                    switch await link.reconnect(waitingUpTo: .seconds(20)) {
                    case .started(let attempt):
                        return [.uint32(UInt32(clamping: attempt))]
                    case .pending:
                        return [.uint32(0)]
                    case .notReady(let why):
                        throw DBusError.remote(name: ControlErrorName.notReady, message: "cannot reconnect now: \(why)")
                    }
                }
            ],
            properties: link.status.signalledProperties,
            signals: ["StateChanged": "sss"],
            live: { link.status.liveProperties }
        )
        try await bus.export(address.path, [interface])
    }

    /// Announces a change: PropertiesChanged with the properties that changed,
    /// then StateChanged for a transition.
    public func publish(_ change: LinkStatusChange) async {
        let new = change.status.signalledProperties
        var changed: [String: DBusValue] = [:]
        for (name, value) in new {
            let old = await bus.property(address.path, ControlAddress.interface, name)
            if old != value { changed[name] = value }
        }
        do {
            if !changed.isEmpty {
                try await bus.setProperties(address.path, ControlAddress.interface, changed)
            }
            if let transition = change.transition {
                try await bus.emit(
                    path: address.path, interface: ControlAddress.interface, member: "StateChanged",
                    [.string(transition.from.rawValue), .string(transition.to.rawValue), .string(transition.cause)]
                )
            }
        } catch {
            // The bus is going away; the daemon's bus loop notices and reconnects.
        }
    }
}

extension Duration {
    /// Whole seconds, rounded up (at least 1): what a caller is told to wait.
    fileprivate var roundedUpSeconds: Int64 {
        let (seconds, attoseconds) = components
        return max(1, seconds + (attoseconds > 0 ? 1 : 0))
    }
}
