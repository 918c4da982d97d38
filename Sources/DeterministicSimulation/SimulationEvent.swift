import BlueZ
import LinkPolicy
import LinkSupervisor

/// What can happen next in a simulation: the agenda's entries. Events meant
/// for one Tether process carry its incarnation (a killed process's replies
/// and timers die with it); model events carry a token where a later change
/// can make them void (a connect cancelled, a link dropped before its
/// services resolved).
enum SimulationEvent {
    case supervisorTimer(SupervisorTimer, generation: UInt64)
    /// A Connect's outcome in bluetoothd; `replies`: the answer reaches Tether
    /// (false when its D-Bus timeout answered it already).
    case connectOutcome(token: UInt64, Result<Void, BlueZError>, replies: Bool)
    case connectNoReply(id: Int, incarnation: Int)
    case subscribeOutcome(id: Int, incarnation: Int, linkToken: UInt64, gattGeneration: Int)
    case pollOutcome(id: Int, incarnation: Int, Result<Void, BlueZError>)
    case servicesResolved(linkToken: UInt64)
    case characteristicsBack(gattGeneration: Int)
    /// An escalation step the daemon runs off the loop (hci-reset) returns.
    case escalationStepReturns(EscalationStep, incarnation: Int)
    /// bluetoothd answers EscalationRun's Adapter1.Powered.
    case escalationPowered(Bool, incarnation: Int)
    case escalationTimer(generation: UInt64)
    case dongleBurst
    case advertisement(generation: UInt64)
    /// bluetoothd's InterfacesRemoved for the device object it removed.
    case removalSignalled
    case nextFault
    case faultEnds(FaultKind)
    case tetherStarts
    case recorderSync(generation: UInt64)
    case recorderRetry(generation: UInt64)
    case recoveryCheck(generation: UInt64)
    case end
}
