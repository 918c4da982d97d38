import ArgumentParser
import ControllerDevice

/// Run by the package's `tether-serdev-rebind@PORT.service`, which
/// `uart-reattach` restarts for a UART controller the kernel attached
/// itself (the Raspberry Pi's onboard radio on current Raspberry Pi OS):
/// the daemon's own user may not write sysfs, so a root unit in a sandbox
/// of its own does this one thing.
struct SerdevRebindCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serdev-rebind",
        abstract: "Rebind the serdev driver of the Bluetooth controller on PORT (as root, for the package's unit).",
        discussion: """
            PORT is a serdev device such as serial0-0 (tether status names it: "UART (hci_uart_bcm on \
            serial0-0)"). Unbinds its driver, but only when that driver made a Bluetooth controller, and \
            asks the serial bus to probe the device again, so the kernel attaches the controller anew, as at \
            boot (usually under another hciN; Tether finds it again by address). Needs root and a writable \
            /sys/bus/serial. The daemon runs it through tether-serdev-rebind@PORT.service: list \
            "uart-reattach" in reconnect.escalate with reconnect.uart_unit = \
            "tether-serdev-rebind@PORT.service". Exit status: 0 done, 1 failed.
            """,
        shouldDisplay: false
    )

    @Option(help: "Where sysfs is mounted.")
    var sysfs = "/sys"

    @Argument(help: "The serdev device, like serial0-0.")
    var port: String

    func run() throws {
        let device: ControllerSerdevDevice
        switch ControllerSerdevDevice.locate(port: port, sysfs: sysfs) {
        case .success(let found): device = found
        case .failure(let failure):
            StandardError.emit("tether serdev-rebind: \(failure)\n")
            throw ExitCode(1)
        }
        switch device.rebind(sysfs: sysfs) {
        case .success:
            let controllers = device.controllers.isEmpty ? "no controller was bound" : device.controllers.joined(separator: ", ")
            print("\(device.port): driver \(device.driver ?? "none") unbound (\(controllers)) and the device probed again")
        case .failure(let failure):
            StandardError.emit("tether serdev-rebind: \(device): \(failure)\n")
            throw ExitCode(1)
        }
    }
}
