import LinkSupervisor
import Readings

/// The dongle: its notifications while its application runs, its
/// advertisements while discovery listens, and its idle-sleep deadline.
extension Simulation {
    static let dongleAddress = "AA:BB:CC:DD:EE:FF"
    static let notifyUUID = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

    /// A burst of notifications; bluetoothd hands them to the process that
    /// holds the notify session, whose loop writes them at the turn's end
    /// and then tells the supervisor once (`LinkService.writeTurnReadings`).
    func dongleBurst() {
        schedule(.dongleBurst, after: settings.burstPeriod)
        guard world.connected, world.dongleReachable, !world.applicationHung, world.characteristicsReady,
              world.notifySession, tetherAlive
        else { return }
        let count = random.int(settings.burstSize)
        let first = delivered + 1
        delivered += UInt64(count)
        record(.readings(first: first, count: count))
        let at = wallClock
        for id in first...delivered {
            let payload = withUnsafeBytes(of: id.bigEndian) { Array($0) }
            recorder.append(
                Reading(receivedAt: at, device: Self.dongleAddress, characteristic: Self.notifyUUID, source: .notify, payload: payload),
                id: id, at: now
            )
        }
        takeTurnReadings()
        guard tetherAlive else { return }  // killed inside the write
        deliver(.dataReceived)
    }

    /// While discovery runs and the dongle advertises: an RSSI update (or,
    /// when bluetoothd had no object for it, a new one: InterfacesAdded with RSSI).
    func advertisement(generation: UInt64) {
        guard generation == advertisementGeneration, world.discovering else { return }
        schedule(.advertisement(generation: generation), after: random.duration(.milliseconds(500) ... .seconds(3)))
        guard world.adapterUsable, world.dongleReachable, !world.connected else { return }
        if !world.deviceObject {
            signalRemoval()
            world.deviceObject = true
            world.staleObject = false
            record(.world("discovery found the dongle: a new device object"))
            publishObservation()
        }
        deliver(.advertising)
    }
}
