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

    @Test func aUSBControllerIsReachedByEveryStep() {
        #expect(ControllerIdentity.line(name: "hci1", address: "00:1A:7D:DA:71:13", transport: Self.usb, escalate: [.powerCycle, .hciReset, .usbReset])
            == "using hci1 (00:1A:7D:DA:71:13): USB (btusb on 1-1:1.0)")
    }

    @Test func aUARTControllerIsToldWhichStepsCannotReachIt() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.powerCycle, .hciReset, .usbReset, .usbRebind])
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset and usb-rebind in reconnect.escalate cannot reach it (usb-reset and usb-rebind need a USB controller); power-cycle and hci-reset can")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.usbReset])
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset in reconnect.escalate cannot reach it (usb-reset needs a USB controller); no configured step can (add hci-reset, power-cycle)")
    }

    /// uart-reattach restarts the unit that attaches the controller: it
    /// reaches one that hciattach or btattach attached, and not the Pi's
    /// radio that current Raspberry Pi OS has the kernel attach (whose
    /// hciuart.service then does nothing).
    @Test func uartReattachReachesAControllerAUnitAttachedAndNotOneTheKernelDid() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.attachedUART, escalate: [.hciReset, .uartReattach])
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart on ttyAMA0)")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.hciReset, .uartReattach])
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); uart-reattach in reconnect.escalate cannot reach it (uart-reattach restarts reconnect.uart_unit, and no unit attaches a controller the kernel attached itself); hci-reset can")
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: Self.uart, escalate: [.usbReset, .uartReattach])
            == "using hci0 (B8:27:EB:12:34:56): UART (hci_uart_bcm on serial0-0); usb-reset and uart-reattach in reconnect.escalate cannot reach it (usb-reset needs a USB controller; uart-reattach restarts reconnect.uart_unit, and no unit attaches a controller the kernel attached itself); no configured step can (add hci-reset, power-cycle)")
        #expect(EscalationStep.uartReattach.reaches(Self.attachedUART))
        #expect(!EscalationStep.uartReattach.reaches(Self.uart))
        #expect(EscalationStep.hciReset.reaches(Self.uart))
    }

    @Test func aControllerTheKernelCannotDescribeIsSaidSo() {
        #expect(ControllerIdentity.line(name: "hci0", address: "B8:27:EB:12:34:56", transport: nil, escalate: [])
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
        #expect(ControllerIdentity.line(name: "hci1", address: "00:1A:7D:DA:71:13", transport: Self.usb, escalate: [.usbReset, .uartReattach])
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
            escalate: [.powerCycle, .hciReset, .usbReset], bluez: .init(), controllers: [Self.pi, Self.dongle])
        #expect(warnings == [
            "reconnect.escalate: usb-reset cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): usb-reset needs a USB controller; power-cycle and hci-reset can",
        ])
    }

    @Test func onlyTheControllerTheConfigNamesCounts() {
        let steps: [EscalationStep] = [.usbReset, .usbRebind]
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, bluez: .init(adapter: "hci1"), controllers: [Self.pi, Self.dongle]).isEmpty)
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, bluez: .init(adapterAddress: "00:1A:7D:DA:71:13"), controllers: [Self.pi, Self.dongle]).isEmpty)
        #expect(ControllerIdentity.escalationWarnings(escalate: steps, bluez: .init(adapterAddress: "B8:27:EB:12:34:56"), controllers: [Self.pi, Self.dongle]) == [
            "reconnect.escalate: usb-reset and usb-rebind cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): usb-reset and usb-rebind need a USB controller; no configured step can reach it (hci-reset and power-cycle can)",
        ])
    }

    @Test func uartReattachOnThePisKernelAttachedRadioIsWarnedOf() {
        #expect(ControllerIdentity.escalationWarnings(escalate: [.powerCycle, .hciReset, .uartReattach], bluez: .init(), controllers: [Self.pi]) == [
            "reconnect.escalate: uart-reattach cannot reach hci0 (B8:27:EB:12:34:56), a UART controller (hci_uart_bcm on serial0-0): uart-reattach restarts reconnect.uart_unit, and no unit attaches a controller the kernel attached itself; power-cycle and hci-reset can",
        ])
        let attached = Self.controller("hci0", "B8:27:EB:12:34:56", ControllerIdentityTests.attachedUART)
        #expect(ControllerIdentity.escalationWarnings(escalate: [.powerCycle, .hciReset, .uartReattach], bluez: .init(), controllers: [attached]).isEmpty)
    }

    @Test func aMachineWithoutControllersGetsNoWarning() {
        #expect(ControllerIdentity.escalationWarnings(escalate: [.usbReset], bluez: .init(), controllers: []).isEmpty)
    }
}
