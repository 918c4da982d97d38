import BlueZ
import Configuration
import DBus
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

/// A controller that never came up, and the adapter problems status shows.
extension LinkService {
    /// While bluetoothd is there but no adapter is found, looks at the
    /// kernel's controllers (now, then with a growing delay); stops once one is.
    func updateControllerCheck() {
        if bluezPresent, resolution.adapter == nil {
            if initCheckTimer == nil { checkControllers() }
            return
        }
        if let initCheckTimer { loop.cancelTimer(initCheckTimer) }
        initCheckTimer = nil
        if let change = initCheck.reset() { controllerCheckChanged(change) }
    }

    func checkControllers() {
        initCheckTimer = nil
        let listed = Set(tree.adapters.map(\.interfaceName))
        if let change = initCheck.check(kernel: kernel.controllers(), listed: listed, at: start.duration(to: loop.now)) {
            controllerCheckChanged(change)
        } else {
            updateAdapterProblem()  // a controller may have come up on a placeholder address meanwhile
        }
        initCheckTimer = loop.schedule(after: initCheck.nextDelay) { [unowned self] in checkControllers() }
    }

    func controllerCheckChanged(_ change: ControllerInitCheck.Change) {
        switch change {
        case .failed(let controller):
            report.logger.error(
                "\(ControllerInitCheck.problem(controller))",
                metadata: ["event": "controller-init-failed", "controller": "\(controller.name)"]
            )
        case .cleared(let controller):
            report.logger.notice(
                "\(controller.name) no longer looks like a controller that failed its initialisation",
                metadata: ["event": "controller-init-cleared", "controller": "\(controller.name)"]
            )
        }
        metrics?.controllerInitFailed(initCheck.failed != nil)
        kernelViewChanged()
    }

    /// The controller is on a placeholder address, in bluetoothd's tree or
    /// only in the kernel's (unconfigured): what Tether waits for.
    func placeholderProblem() -> String? {
        guard resolution.adapter == nil else { return nil }
        let (name, address): (String, String)
        if let adapter = resolution.placeholder {
            (name, address) = (adapter.interfaceName, adapter.address.uppercased())
        } else if let controller = initCheck.awaitingAddress {
            (name, address) = (controller.name, controller.address)
        } else {
            return nil
        }
        return ControllerIdentity.placeholderProblem(
            name: name, address: address, kind: PlaceholderAddress.kind(of: address), configured: config.bluez.adapterAddress)
    }

    /// What status shows of an adapter problem only the kernel sees.
    func updateAdapterProblem() {
        let problem: String?
        switch resolution.observation.radioBlock {
        case .hard:
            problem = "\(controllerName(adapter: resolution.adapter?.interfaceName) ?? "the controller") is blocked by a hardware switch (rfkill); waiting for it to lift"
        case .soft:
            problem = "\(controllerName(adapter: resolution.adapter?.interfaceName) ?? "the controller") is blocked by rfkill (soft block)"
                + (config.reconnect.escalate.contains(.rfkillUnblock) ? "; Tether unblocks it (rfkill-unblock)" : "; \"rfkill unblock bluetooth\" clears it")
        case .none:
            let placeholder = placeholderProblem()
            problem = initCheck.failed.map(ControllerInitCheck.problem) ?? placeholder
            if problem != adapterProblem, let placeholder, problem == placeholder {
                report.logger.warning("\(placeholder)", metadata: ["event": "adapter-placeholder-address"])
            }
        }
        guard problem != adapterProblem else { return }
        adapterProblem = problem
        shared.withLock { $0.adapterProblem = problem }
        publishIfChanged([])
    }
}
