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

/// rfkill: the radio blocks the kernel reports, and the unblock step.
extension LinkService {
    /// The controller that rfkill and the USB steps act on: bluetoothd's
    /// adapter, else the kernel's controller that failed its set-up, else
    /// the configured name.
    func controllerName(adapter: String?) -> String? {
        adapter ?? initCheck.failed?.name ?? config.bluez.adapter
    }

    func radioBlock(adapter: String?) -> RadioBlock {
        guard let name = controllerName(adapter: adapter), let entry = switches.bluetoothSwitch(named: name) else {
            return .none
        }
        return entry.hardBlocked ? .hard : entry.softBlocked ? .soft : .none
    }

    /// Opens `/dev/rfkill` for its events (at open it lists every switch).
    /// Without it (a container, no read access) blocks still show as the
    /// adapter powered off; says once, at debug level, why.
    func openRfkill() {
        guard let rfkillSource else { return }
        switch RfkillDevice.openEvents(path: rfkillSource.device) {
        case .success(let device):
            rfkill = device
            rfkillWatch = loop.watch(device.descriptor, interest: .readable) { [unowned self] _ in readRfkill() }
            readRfkill()
        case .failure(let failure):
            report.logger.debug("rfkill blocks not followed: \(failure)")
        }
    }

    func closeRfkill() {
        if let rfkillWatch { loop.removeWatch(rfkillWatch) }
        rfkillWatch = nil
        rfkill?.close()
        rfkill = nil
    }

    func readRfkill() {
        guard let device = rfkill else { return }
        var changed = false
        for event in device.readEvents() {
            changed = switches.apply(event) { RfkillDevice.name(ofSwitch: $0, sysfs: rfkillSource?.sysfs ?? "") } || changed
        }
        if let failure = device.failure {
            report.logger.warning("rfkill blocks no longer followed: \(failure)")
            closeRfkill()
        }
        guard changed else { return }
        let block = radioBlock(adapter: resolution.adapter?.interfaceName)
        metrics?.radioBlock(block)
        kernelViewChanged()
    }

    /// The `rfkill-unblock` step: clears the soft block of `controller`'s switch.
    func unblockRadio(_ controller: String) -> Result<Void, LinkFailure> {
        guard let rfkillSource, rfkill != nil else { return .failure(LinkFailure(.fatal, "rfkill is not followed")) }
        guard let entry = switches.bluetoothSwitch(named: controller) else {
            return .failure(LinkFailure(.transient, "\(controller) has no rfkill switch"))
        }
        if entry.hardBlocked { return .failure(LinkFailure(.fatal, "\(controller) is blocked by a hardware switch")) }
        guard entry.softBlocked else { return .success(()) }
        return RfkillDevice.setSoftBlock(index: entry.index, blocked: false, path: rfkillSource.device)
            .mapError { LinkFailure(.fatal, $0.description) }
    }
}
