import Configuration
import DBus
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The CLI's side of `io.tether.Tether1`: finds a daemon instance on the bus,
/// reads its status, asks it to reconnect and follows its changes.
public struct ControlClient: Sendable {
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// Nobody owns the instance's bus name.
        case notRunning(ControlAddress)
        /// A process owns the instance's bus name but did not answer within
        /// `waited`: stopped (SIGSTOP, a debugger) or its event loop stuck.
        case notAnswering(ControlAddress, pid: UInt32?, waited: Duration)
        /// The bus policy refused the call; the text names what grants it.
        case accessDenied(String)
        /// The daemon answered with an error (e.g. NotReady).
        case refused(String)
        case bus(DBusError)

        public var description: String {
            switch self {
            case .notRunning(let address):
                return "the daemon is not running (nobody owns \(address.busName) on the system bus); start it with: systemctl start \(address.unitName)"
            case .notAnswering(let address, let pid, let waited):
                let daemon = pid.map { "the daemon (pid \($0))" } ?? "the daemon"
                return "\(daemon) owns \(address.busName) on the system bus but did not answer within "
                    + "\(DurationText.rounded(waited)): it is stopped (SIGSTOP, a debugger) or its event loop is stuck; "
                    + "the unit's watchdog restarts a stuck daemon, and journalctl -u \(address.unitName) tells what it did last; "
                    + "to restart it now: systemctl restart \(address.unitName)"
            case .accessDenied(let text): return text
            case .refused(let text): return text
            case .bus(let error): return "\(error)"
            }
        }
    }

    /// The group whose members the shipped D-Bus policy lets call Reconnect:
    /// the operators' (group tether, the readers', may not).
    public static let operatorGroup = "tether-admin"

    public let bus: Bus
    public let address: ControlAddress

    public init(bus: Bus, address: ControlAddress) {
        self.bus = bus
        self.address = address
    }

    /// Whether the instance's daemon is on the bus.
    public func isRunning() async throws(Failure) -> Bool {
        do { return try await bus.nameOwner(of: address.busName) != nil } catch { throw .bus(error) }
    }

    /// How long `status()` waits for the daemon by default. It answers from
    /// its event loop in milliseconds; a daemon that takes seconds is stuck.
    public static let statusTimeout: Duration = .seconds(5)

    public func status(timeout: Duration = statusTimeout) async throws(Failure) -> LinkStatus {
        do {
            let properties = try await bus.getAllProperties(
                destination: address.busName, path: address.path, interface: ControlAddress.interface,
                timeout: timeout
            )
            return try LinkStatus(properties: properties)
        } catch {
            throw await classify(error, action: "read the status", waited: timeout)
        }
    }

    /// Asks for a reconnect; returns the attempt number it started (0 when
    /// the attempt is still held back by an escalation step).
    public func reconnect() async throws(Failure) -> UInt32 {
        let timeout = Duration.seconds(30)
        do {
            let reply = try await bus.call(
                destination: address.busName, path: address.path, interface: ControlAddress.interface,
                method: "Reconnect", timeout: timeout
            )
            return UInt32(clamping: reply.first?.int64 ?? 0)
        } catch {
            throw await classify(error, action: "ask for a reconnect", waited: timeout)
        }
    }

    /// Forgets the dongle the daemon is bound to and reconnects; returns the
    /// daemon's account of it.
    public func rebind() async throws(Failure) -> String {
        let timeout = Duration.seconds(30)
        do {
            let reply = try await bus.call(
                destination: address.busName, path: address.path, interface: ControlAddress.interface,
                method: "Rebind", timeout: timeout
            )
            return reply.first?.string ?? ""
        } catch {
            throw await classify(error, action: "rebind", waited: timeout)
        }
    }

    /// State transitions (from, to, cause) as the daemon announces them.
    public func stateChanges() async throws(Failure) -> AsyncStream<(from: String, to: String, cause: String)> {
        let signals: AsyncStream<Message>
        do {
            // Believed only from the daemon: the current owner of its bus
            // name, as the bus driver says (any local user may send signals).
            signals = try await bus.signals(
                matching: MatchRule(
                    sender: address.busName, interface: ControlAddress.interface, member: "StateChanged",
                    path: address.path, signature: "sss"
                )
            )
        } catch {
            throw .bus(error)
        }
        return AsyncStream { continuation in
            let forwarder = Task {
                for await signal in signals where signal.body.count == 3 {
                    continuation.yield((signal.body[0].string ?? "", signal.body[1].string ?? "", signal.body[2].string ?? ""))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in forwarder.cancel() }
        }
    }

    /// Whether this process has the operator group (by name, as the policy names it).
    private static func inOperatorGroup() -> Bool {
        guard let group = getgrnam(operatorGroup) else { return false }
        let gid = group.pointee.gr_gid
        let count = getgroups(0, nil)
        guard count > 0 else { return getegid() == gid }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let filled = getgroups(count, &groups)
        return getegid() == gid || groups.prefix(max(0, Int(filled))).contains(gid)
    }

    private func classify(_ error: DBusError, action: String, waited: Duration) async -> Failure {
        switch error.name {
        case DBusErrorName.serviceUnknown, DBusErrorName.nameHasNoOwner:
            return .notRunning(address)
        case DBusErrorName.noReply:
            // No answer in time, or (from the bus) the daemon left without
            // answering: the bus itself tells which, and whose process it is.
            do {
                guard let pid = try await bus.processID(ofOwnerOf: address.busName) else { return .notRunning(address) }
                return .notAnswering(address, pid: pid, waited: waited)
            } catch {
                return .notAnswering(address, pid: nil, waited: waited)
            }
        case DBusErrorName.accessDenied:
            let rule = "permission denied: the D-Bus policy lets only root and members of group '\(Self.operatorGroup)' \(action)"
            if getuid() != 0, !Self.inOperatorGroup() {
                return .accessDenied(
                    "\(rule); you are not in group '\(Self.operatorGroup)': add yourself with "
                        + "sudo usermod -aG \(Self.operatorGroup) $USER, then log in again"
                )
            }
            return .accessDenied(
                "\(rule), and you are, so the policy file is missing or not loaded: install io.tether.Tether.conf "
                    + "in /usr/share/dbus-1/system.d and run: systemctl reload dbus"
            )
        case ControlErrorName.notReady, ControlErrorName.rateLimited:
            return .refused(error.message)
        default:
            return .bus(error)
        }
    }
}
