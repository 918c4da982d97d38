import DBus
import LinkSupervisor
import FoundationEssentials
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
/// Properties (read-only): see `LinkStatus`. `ReadingsWritten` and
/// `LastReadingAt` change with every reading, so they are computed on each
/// Get and never signalled; the others are announced with PropertiesChanged.
///
/// Signal `StateChanged(s from, s to, s cause)` on every state transition.
public struct ControlServer: Sendable {
    public let address: ControlAddress
    private let bus: Bus
    private let link: any ControlledLink

    public init(bus: Bus, address: ControlAddress, link: any ControlledLink) {
        self.bus = bus
        self.address = address
        self.link = link
    }

    /// Exports the object. The caller takes the bus name afterwards, so that
    /// a client that sees the name can already call the object.
    public func export() async throws(DBusError) {
        let link = link
        let interface = ExportedInterface(
            name: ControlAddress.interface,
            methods: [
                "Reconnect": .init(out: "u") { _ in
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
