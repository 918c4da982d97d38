import HCI
import LinkPolicy
import Testing
@testable import TetherDaemon

/// The journal's line for the controller Tether takes up: what the radio is
/// and which configured steps cannot reach it.
@Suite struct ControllerIdentityTests {
    /// The Raspberry Pi's onboard radio under current Raspberry Pi OS: attached by the kernel (serdev).
    static let uart = ControllerTransport(controller: "hci0", bus: .uart, driver: "hci_uart_bcm", port: "serial0-0", attachedByKernel: true)
    /// A UART controller a program attached (hciattach or btattach, run by a unit).
    static let attachedUART = ControllerTransport(controller: "hci0", bus: .uart, driver: "hci_uart", port: "ttyAMA0")
    static let usb = ControllerTransport(controller: "hci1", bus: .usb, driver: "btusb", port: "1-1:1.0")
    /// reconnect.uart_unit's default.
    static let hciuart = "hciuart.service"
    /// The package's unit that rebinds the Pi's radio's serdev driver.
    static let serdevRebind = "tether-serdev-rebind@serial0-0.service"

    @Test func aUSBControllerIsReachedByEveryStep() {
        #expect(ControllerIdentity.line(name: "hci1", address: "00:1A:7D:DA:71:13", transport: Self.usb, escalate: [.powerCycle, .hciReset, .usbReset], uartUnit: Self.hciuart)
            == "using hci1 (00:1A:7D:DA:71:13): USB (btusb on 1-1:1.0)")
    }

    @Test func aUARTControllerIsToldWhichStepsCannotReachIt() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.powerCycle, .hciReset, .usbReset, .usbRebind], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset and usb-rebind in reconnect.escalate cannot reach it (usb-reset and usb-rebind need a USB controller); power-cycle and hci-reset can")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.usbReset], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset in reconnect.escalate cannot reach it (usb-reset needs a USB controller); no configured step can (add hci-reset, power-cycle)")
    }

    /// uart-reattach restarts the unit that attaches the controller: it
    /// reaches one that hciattach or btattach attached, and not the Pi's
    /// radio that current Raspberry Pi OS has the kernel attach (whose
    /// hciuart.service then does nothing).
    @Test func uartReattachReachesAControllerAUnitAttachedAndNotOneTheKernelDid() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.attachedUART, escalate: [.hciReset, .uartReattach], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart on ttyAMA0)")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.hciReset, .uartReattach], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); uart-reattach in reconnect.escalate cannot reach it (uart-reattach restarts reconnect.uart_unit (hciuart.service), which does not attach a controller the kernel attached itself; set reconnect.uart_unit = \"tether-serdev-rebind@serial0-0.service\", which rebinds its serdev driver); hci-reset can")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.usbReset, .uartReattach], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset and uart-reattach in reconnect.escalate cannot reach it (usb-reset needs a USB controller; uart-reattach restarts reconnect.uart_unit (hciuart.service), which does not attach a controller the kernel attached itself; set reconnect.uart_unit = \"tether-serdev-rebind@serial0-0.service\", which rebinds its serdev driver); no configured step can (add hci-reset, power-cycle)")
        #expect(EscalationStep.uartReattach.reaches(Self.attachedUART, uartUnit: Self.hciuart))
        #expect(!EscalationStep.uartReattach.reaches(Self.uart, uartUnit: Self.hciuart))
        #expect(EscalationStep.hciReset.reaches(Self.uart, uartUnit: Self.hciuart))
    }

    /// The package's tether-serdev-rebind@PORT.service re-attaches a
    /// controller the kernel attached, by rebinding its serdev driver: with
    /// uart_unit naming it for that port, uart-reattach reaches it; naming
    /// another port's, it does not.
    @Test func uartReattachReachesTheKernelsControllerThroughItsSerdevRebindUnit() {
        #expect(Self.uart.serdevRebindUnit == Self.serdevRebind)
        #expect(Self.attachedUART.serdevRebindUnit == nil)
        #expect(Self.usb.serdevRebindUnit == nil)
        #expect(EscalationStep.uartReattach.reaches(Self.uart, uartUnit: Self.serdevRebind))
        #expect(!EscalationStep.uartReattach.reaches(Self.uart, uartUnit: "tether-serdev-rebind@serial1-0.service"))
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.hciReset, .uartReattach], uartUnit: Self.serdevRebind)
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0)")
        #expect(ControllerIdentity.escalationWarnings(
            escalate: [.powerCycle, .hciReset, .uartReattach], uartUnit: Self.serdevRebind, bluez: .init(), controllers: [EscalationReachTests.pi]).isEmpty)
    }

    /// What uart-reattach does before it asks systemd: a controller the
    /// kernel attached is re-attached only through its own serdev rebind
    /// unit, and the refusal names that unit.
    @Test func uartReattachRefusesAUnitThatCannotReAttachTheController() {
        #expect(SystemControllerKernel.uartReattachRefusal(controller: "hci0", transport: Self.attachedUART, unit: Self.hciuart) == nil)
        #expect(SystemControllerKernel.uartReattachRefusal(controller: "hci0", transport: Self.uart, unit: Self.serdevRebind) == nil)
        #expect(SystemControllerKernel.uartReattachRefusal(controller: "hci0", transport: Self.uart, unit: Self.hciuart)?.description
            == "hci0 was attached by the kernel (hci_uart_bcm on serial0-0), not by a unit: restarting hciuart.service would not attach it again; "
            + "set reconnect.uart_unit = \"tether-serdev-rebind@serial0-0.service\", which rebinds its serdev driver")
        #expect(SystemControllerKernel.uartReattachRefusal(controller: "hci1", transport: Self.usb, unit: Self.serdevRebind)?.description
            == "hci1 is not a UART controller: restarting tether-serdev-rebind@serial0-0.service would not reach it")
        #expect(SystemControllerKernel.uartReattachRefusal(controller: "hci3", transport: nil, unit: Self.hciuart) != nil)
    }

    @Test func aControllerTheKernelCannotDescribeIsSaidSo() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: nil, escalate: [], uartUnit: Self.hciuart)
            == "using hci0 (B8:27:EB:12:34:56): the kernel does not say what it is")
    }

    @Test func theUSBStepsNeedAUSBControllerAndUARTReattachAUARTOne() {
        for bus in ControllerBus.allCases {
            for step in EscalationStep.allCases {
                let expected = switch step {
                case .usbReset, .usbRebind: bus == .usb
                case .uartReattach: bus == .uart
                case .powerCycle, .hciReset, .rfkillUnblock: true
                }
                #expect(step.reaches(bus) == expected, "\(step) on \(bus)")
            }
        }
        #expect(ControllerIdentity.line(name: "hci1", address: "00:1A:7D:DA:71:13", transport: Self.usb, escalate: [.usbReset, .uartReattach], uartUnit: Self.hciuart)
            == "using hci1 (00:1A:7D:DA:71:13): USB (btusb on 1-1:1.0); uart-reattach in reconnect.escalate cannot reach it (uart-reattach needs a UART controller); usb-reset can")
    }
}

/// check-config's warnings about steps that cannot reach the controllers
/// the config may use.
@Suite struct EscalationReachTests {
    static func controller(_ name: String, _ address: String, _ transport: ControllerTransport) -> (KernelController, ControllerTransport) {
        (KernelController(name: name, index: Int(name.dropFirst(3)) ?? 0, up: true, settingUp: false, address: address, bus: transport.bus), transport)
    }

    static let pi = controller("hci0", "B8:27:EB:12:34:56", ControllerIdentityTests.uart)
    static let dongle = controller("hci1", "00:1A:7D:DA:71:13", ControllerIdentityTests.usb)

    @Test func theShippedStepsOnAPisOnboardRadioAreWarnedOf() {
        let warnings = ControllerIdentity.escalationWarnings(
            escalate: [.powerCycle, .hciReset, .usbReset], uartUnit: ControllerIdentityTests.hciuart, bluez: .init(), controllers: [Self.pi, Self.dongle])
        #expect(warnings == [
            "reconnect.escalate: usb-reset cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): usb-reset needs a USB controller; power-cycle and hci-reset can",
        ])
    }

    @Test func onlyTheControllerTheConfigNamesCounts() {
        let steps: [EscalationStep] = [.usbReset, .usbRebind]
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, uartUnit: ControllerIdentityTests.hciuart, bluez: .init(adapter: "hci1"), controllers: [Self.pi, Self.dongle]).isEmpty)
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, uartUnit: ControllerIdentityTests.hciuart, bluez: .init(adapterAddress: "00:1A:7D:DA:71:13"), controllers: [Self.pi, Self.dongle]).isEmpty)
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, uartUnit: ControllerIdentityTests.hciuart, bluez: .init(adapterAddress: "B8:27:EB:12:34:56"), controllers: [Self.pi, Self.dongle]) == [
            "reconnect.escalate: usb-reset and usb-rebind cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): usb-reset and usb-rebind need a USB controller; no configured step can reach it (hci-reset and power-cycle can)",
        ])
    }

    @Test func uartReattachOnThePisKernelAttachedRadioIsWarnedOf() {
        #expect(ControllerIdentity.escalationWarnings(escalate: [.powerCycle, .hciReset, .uartReattach], uartUnit: ControllerIdentityTests.hciuart, bluez: .init(), controllers: [Self.pi]) == [
            "reconnect.escalate: uart-reattach cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): uart-reattach restarts reconnect.uart_unit (hciuart.service), which does not attach a controller the kernel attached itself; set reconnect.uart_unit = \"tether-serdev-rebind@serial0-0.service\", which rebinds its serdev driver; power-cycle and hci-reset can",
        ])
        let attached = Self.controller("hci0", "B8:27:EB:12:34:56", ControllerIdentityTests.attachedUART)
        #expect(ControllerIdentity.escalationWarnings(escalate: [.powerCycle, .hciReset, .uartReattach], uartUnit: ControllerIdentityTests.hciuart, bluez: .init(), controllers: [attached]).isEmpty)
    }

    @Test func aMachineWithoutControllersGetsNoWarning() {
        #expect(ControllerIdentity.escalationWarnings(escalate: [.usbReset], uartUnit: ControllerIdentityTests.hciuart, bluez: .init(), controllers: []).isEmpty)
    }
}
