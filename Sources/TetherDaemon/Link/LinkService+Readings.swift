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

/// The readings fast path: notifications taken off the bus, written each turn, handed to the recorder.
extension LinkService {
    /// The fast path: a notification is a PropertiesChanged of Value alone on
    /// a notify characteristic, from bluetoothd. Decoded in place; anything
    /// else goes on to the general path.
    func intercept(_ signal: RawSignal) -> Bool {
        guard !notifyPaths.isEmpty, signal.is(interface: StandardInterface.properties, member: "PropertiesChanged"),
              let owner = monitor.currentOwner
        else { return false }
        for entry in notifyPaths where signal.hasPath(entry.path) {
            #if DST_BUG_SIGNAL_FROM_NON_OWNER  // planted bug (make dst-selftest): a reading believed from anyone
            let fromOwner = true
            #else
            let fromOwner = signal.hasSender(owner)
            #endif
            guard fromOwner, let bytes = signal.onlyByteArrayProperty(interface: BlueZ.gattCharacteristicInterface, name: "Value")
            else { return false }
            takeNotification(bytes, characteristic: entry.uuid)
            return true
        }
        return false
    }

    /// Readings, and only they, make a turn "busy" for the loop's load
    /// moderation: replies to our own calls (a reconnect's) are never held back
    /// unless a dense stream of notifications is flowing.
    func take(_ reading: Reading) {
        var reading = reading
        // The boot's clocks, read in the same turn as the wall clock was.
        if reading.boot == nil { reading.boot = bootClock.now() }
        turnReadings.append(reading)
        lastTakenThisTurn = reading.receivedAt
        loop.noteBusy()
    }

    /// Readings go to the recorder's queue at most this often: each hand-off
    /// wakes its thread, and a dense stream (a turn every 4 ms, see
    /// `loadModeration`) would wake it every turn. A quiet stream's readings
    /// (turns further apart) are handed in at once; held ones wait at most
    /// this long, on a loop timer.
    static let handOffSpacing: Duration = .milliseconds(25)

    /// At the end of each loop turn: the supervisor hears of the turn's data,
    /// and the readings held go to the recorder in one batch, unless the last
    /// batch went less than `handOffSpacing` ago.
    func writeTurnReadings() {
        if notifiedThisTurn {
            notifiedThisTurn = false
            if !stopping { dataArrived() }
        }
        handOffReadings()
        guard let last = lastTakenThisTurn else { return }
        lastTakenThisTurn = nil
        let now = loop.now
        shared.withLock { $0.lastReadingAt = now }
        metrics?.readingsTaken(lastAt: last)
        if !anyReadingWritten {
            // STATUS= said "no reading yet": say otherwise now, not at the
            // next watchdog tick (up to 15 s later). Later readings only age
            // the line, which each tick refreshes.
            anyReadingWritten = true
            publishIfChanged([])
        }
    }

    func handOffReadings() {
        guard !turnReadings.isEmpty else { return }
        let now = loop.now
        if !stopping, let previous = lastHandOff, previous.duration(to: now) < Self.handOffSpacing {
            if handOffTimer == nil {
                // Its turn ends with this hook, which then hands them in.
                handOffTimer = loop.schedule(at: previous + Self.handOffSpacing) { [unowned self] in handOffTimer = nil }
            }
            return
        }
        if let handOffTimer { loop.cancelTimer(handOffTimer) }
        handOffTimer = nil
        recorder.write(turnReadings)
        turnReadings.removeAll(keepingCapacity: true)
        lastHandOff = now
    }
}
