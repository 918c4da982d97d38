import Configuration
import HCI
import LinkPolicy

/// What the journal says once each time Tether takes up a controller: what
/// the radio is (bus, driver, the device it hangs on) and, when some of the
/// configured escalation steps cannot reach it, which (a USB reset cannot
/// reach the Raspberry Pi's onboard radio, which is on a UART).
public enum ControllerIdentity {
    /// "using hci0 (B8:27:EB:12:34:56): UART (hci_uart on ttyAMA0); usb-reset in reconnect.escalate cannot reach it (usb-reset needs a USB controller); hci-reset and power-cycle can".
    static func line(name: String, address: String, transport: ControllerTransport?, escalate: [EscalationStep], uartUnit: String) -> String {
        var line = "using \(name) (\(address))"
        guard let transport else { return line + ": the kernel does not say what it is" }
        line += ": \(transport)"
        let (reachable, unreachable) = reach(of: escalate, on: transport, uartUnit: uartUnit)
        guard !unreachable.isEmpty else { return line }
        line += "; \(Self.list(unreachable)) in reconnect.escalate cannot reach it (\(Self.why(unreachable, cannotReach: transport, uartUnit: uartUnit)))"
        line += reachable.isEmpty ? "; no configured step can (add hci-reset, power-cycle)" : "; \(Self.list(reachable)) can"
        return line
    }

    /// `tether check-config`'s warnings: for each controller this config
    /// may use (the one `[bluez]` names, else every one the kernel has), the
    /// configured escalation steps that cannot reach it. None on a machine
    /// without controllers: nothing is known there.
    public static func escalationWarnings(for config: TetherConfig, sysfs: String = "/sys") -> [String] {
        let controllers = KernelControllers.list(sysfs: "\(sysfs)/class/bluetooth")
        return escalationWarnings(
            escalate: config.reconnect.escalate, uartUnit: config.reconnect.uartUnit, bluez: config.bluez,
            controllers: controllers.map { ($0, ControllerTransport.read($0, sysfs: sysfs)) })
    }

    static func escalationWarnings(
        escalate: [EscalationStep], uartUnit: String, bluez: TetherConfig.BlueZSection,
        controllers: [(KernelController, ControllerTransport)]
    ) -> [String] {
        let used = controllers.filter { controller, _ in
            if let address = bluez.adapterAddress { return controller.address.uppercased() == address.uppercased() }
            if let name = bluez.adapter { return controller.name == name }
            return true
        }
        return used.compactMap { controller, transport in
            let (reachable, unreachable) = reach(of: escalate, on: transport, uartUnit: uartUnit)
            guard !unreachable.isEmpty else { return nil }
            return "reconnect.escalate: \(list(unreachable)) cannot reach \(controller.name) (\(controller.address)), "
                + "a \(transport.bus.displayName) controller\(transport.detail.map { " (\($0))" } ?? ""): \(why(unreachable, cannotReach: transport, uartUnit: uartUnit)); "
                + (reachable.isEmpty ? "no configured step can reach it (hci-reset and power-cycle can)" : "\(list(reachable)) can")
        }
    }

    /// "hci0 is on the placeholder address AA:AA:AA:AA:AA:AA (BCM43430A1's default), not an address of its own: …".
    static func placeholderProblem(name: String, address: String, kind: String?, configured: String?) -> String {
        "\(name) is on the placeholder address \(address)\(kind.map { " (\($0))" } ?? ""), not an address of its own yet "
            + "(on a Raspberry Pi, bthelper sets it after boot; by hand: btmgmt --index \(name.dropFirst(3)) public-addr ADDRESS); "
            + "BlueZ keeps its pairings under the real address, so Tether waits for "
            + (configured.map { "\($0), as [bluez] adapter says" } ?? "it")
    }

    /// The configured steps that can reach `transport`'s controller, and those that cannot, in order.
    private static func reach(
        of steps: [EscalationStep], on transport: ControllerTransport, uartUnit: String
    ) -> (reachable: [EscalationStep], unreachable: [EscalationStep]) {
        (steps.filter { $0.reaches(transport, uartUnit: uartUnit) }, steps.filter { !$0.reaches(transport, uartUnit: uartUnit) })
    }

    /// Why `steps` cannot reach `transport`'s controller: "usb-reset needs a
    /// USB controller", "usb-reset needs a USB controller, uart-reattach a
    /// UART one", or, on a UART controller the kernel attached, that
    /// `uart_unit` does not attach it and which unit would.
    private static func why(_ steps: [EscalationStep], cannotReach transport: ControllerTransport, uartUnit: String) -> String {
        let usb = steps.filter { $0.needs == .usb }
        let uart = steps.filter { $0.needs == .uart }
        var parts: [String] = []
        if !usb.isEmpty { parts.append("\(list(usb)) \(usb.count == 1 ? "needs" : "need") a USB controller") }
        if !uart.isEmpty {
            if transport.bus == .uart {
                parts.append("\(list(uart)) restarts reconnect.uart_unit (\(uartUnit)), which does not attach a controller the kernel attached itself\(transport.serdevRebindAdvice)")
            } else {
                parts.append(parts.isEmpty ? "\(list(uart)) needs a UART controller" : "\(list(uart)) a UART one")
            }
        }
        return parts.joined(separator: transport.bus == .uart ? "; " : ", ")
    }

    private static func list(_ steps: [EscalationStep]) -> String {
        let names = steps.map(\.rawValue)
        guard names.count > 1, let last = names.last else { return names.first ?? "" }
        return names.dropLast().joined(separator: ", ") + " and " + last
    }
}

extension EscalationStep {
    /// The bus the step needs its controller on: the USB steps a USB
    /// device, `uart-reattach` a UART; nil for the steps that go through
    /// bluetoothd, HCI or rfkill, which every controller has.
    var needs: ControllerBus? {
        switch self {
        case .usbReset, .usbRebind: .usb
        case .uartReattach: .uart
        case .powerCycle, .hciReset, .rfkillUnblock: nil
        }
    }

    /// Whether the step can act on a controller on `bus`.
    func reaches(_ bus: ControllerBus) -> Bool {
        needs.map { $0 == bus } ?? true
    }

    /// Whether the step can act on `transport`'s controller: on its bus,
    /// and for `uart-reattach` (which restarts `uartUnit`) attached by a
    /// program a unit runs, or attached by the kernel when `uartUnit` is the
    /// package's unit that rebinds that controller's serdev driver.
    func reaches(_ transport: ControllerTransport, uartUnit: String) -> Bool {
        guard reaches(transport.bus) else { return false }
        guard self == .uartReattach, transport.attachedByKernel else { return true }
        return uartUnit == transport.serdevRebindUnit
    }
}
