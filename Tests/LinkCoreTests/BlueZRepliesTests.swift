import BlueZ
import Configuration
import LinkCore
import LinkSupervisor
import Testing

/// The rules for bluetoothd's answers, one call at a time: what the daemon's
/// ActionLane and the deterministic simulation both apply.
@Suite struct BlueZRepliesTests {
    static let uuid = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
    static func error(_ name: String, _ message: String = "") -> Result<Void, BlueZError> {
        .failure(BlueZError(name: name, message: message))
    }

    @Test func startNotifyInProgressIsOurOwnSession() {
        #expect(BlueZReplies.startNotify(.success(()), characteristic: Self.uuid) == nil)
        #expect(BlueZReplies.startNotify(Self.error(BlueZ.ErrorName.inProgress, "In Progress"), characteristic: Self.uuid) == nil)
        let refused = BlueZReplies.startNotify(Self.error(BlueZ.ErrorName.failed, "Not connected"), characteristic: Self.uuid)
        #expect(refused?.kind == .transient)
    }

    @Test func notPairedWantsABondAndSaysHow() {
        let failure = BlueZReplies.startNotify(Self.error(BlueZ.ErrorName.notPermitted, "Not paired"), characteristic: Self.uuid)
        #expect(failure?.kind == .fatal)
        #expect(failure?.description.contains("dongle.pairing") == true)
    }

    @Test func notifyAcquiredByOthersIsTransientAndNamesTheRestart() {
        let failure = BlueZReplies.notifyFailure(
            BlueZError(name: BlueZ.ErrorName.notPermitted, message: "Notify acquired"), characteristic: Self.uuid)
        #expect(failure.kind == .transient)
        #expect(failure.description.contains("systemctl restart bluetooth"))
        // Any other NotPermitted is the plain mapping: fatal.
        #expect(BlueZReplies.notifyFailure(
            BlueZError(name: BlueZ.ErrorName.notPermitted, message: "Write not permitted"), characteristic: Self.uuid
        ).kind == .fatal)
    }

    @Test func acquireNotifyInProgressFallsBackOnlyWhenAllowed() {
        let inProgress = BlueZError(name: BlueZ.ErrorName.inProgress, message: "In Progress")
        #expect(BlueZReplies.acquireNotifyRefused(inProgress, characteristic: Self.uuid, mayUseStartNotify: true) == .useStartNotify)
        guard case .failed(let failure) = BlueZReplies.acquireNotifyRefused(inProgress, characteristic: Self.uuid, mayUseStartNotify: false)
        else { Issue.record("AcquireNotify's InProgress without a fall-back must fail"); return }
        #expect(failure.kind == .fatal)
        #expect(failure.description.contains("dongle.notify_path"))
        let other = BlueZError(name: BlueZ.ErrorName.failed, message: "Not connected")
        #expect(BlueZReplies.acquireNotifyRefused(other, characteristic: Self.uuid, mayUseStartNotify: true)
            == .failed(LinkFailure(other)))
    }

    @Test func discoveryInProgressIsDiscoveringOnlyWhileTheAdapterSaysSo() {
        let inProgress = Self.error(BlueZ.ErrorName.inProgress, "Operation already in progress")
        #expect(BlueZReplies.startDiscovery(.success(()), adapterDiscovering: false) == nil)
        // Our own session, already running.
        #expect(BlueZReplies.startDiscovery(inProgress, adapterDiscovering: true) == nil)
        // A start the controller failed: bluetoothd dropped the session.
        let refused = BlueZReplies.startDiscovery(inProgress, adapterDiscovering: false)
        #expect(refused?.kind == .transient)
        #expect(refused?.description.contains("not discovering") == true)
        #expect(BlueZReplies.startDiscovery(Self.error(BlueZ.ErrorName.notReady, "Resource Not Ready"), adapterDiscovering: true)?.kind == .transient)
    }

    @Test func connectInProgressNeedsACancel() throws {
        let answer = BlueZReplies.connect(Self.error(BlueZ.ErrorName.inProgress, "In Progress"))
        guard case .failure(let failure) = answer else { Issue.record("InProgress is no connect"); return }
        #expect(failure.kind == .needsCancel)
    }

    @Test func pairAlreadyExistsIsBonded() {
        let justWorks = TetherConfig.Pairing.justWorks
        #expect(BlueZReplies.pair(.success(()), pairing: justWorks, passkeyGiven: false, address: nil).failure == nil)
        #expect(BlueZReplies.pair(
            Self.error(BlueZ.ErrorName.alreadyExists, "Already Exists"), pairing: justWorks, passkeyGiven: false, address: nil
        ).failure == nil)
    }

    @Test func aRefusedPairingSaysWhatToCheck() {
        let answer = BlueZReplies.pair(
            Self.error(BlueZ.ErrorName.authenticationFailed, "Authentication Failed"), pairing: .justWorks,
            passkeyGiven: false, address: nil)
        guard case .failure(let failure) = answer else { Issue.record("a refused pairing is no bond"); return }
        #expect(failure.kind == .fatal)
        #expect(failure.description.contains("passkey-file"))
    }

    /// A passkey configured, a bond the agent gave no passkey to: bluetoothd
    /// accepted Just Works; not the dongle's proof, whatever Pair answered.
    @Test func aBondWithoutThePasskeyIsRefused() {
        let pairing = TetherConfig.Pairing.passkey(.file("/etc/tether/passkey"))
        for answer in [Result<Void, BlueZError>.success(()), Self.error(BlueZ.ErrorName.alreadyExists)] {
            let result = BlueZReplies.pair(answer, pairing: pairing, passkeyGiven: false, address: "AA:BB:CC:DD:EE:FF")
            guard case .failure(let failure) = result else { Issue.record("an unauthenticated bond was accepted"); return }
            #expect(failure.unauthenticatedBond)
            #expect(failure.description.contains("AA:BB:CC:DD:EE:FF"))
            #expect(BlueZReplies.pair(answer, pairing: pairing, passkeyGiven: true, address: nil).failure == nil)
        }
    }

    @Test func registerAgentAlreadyExistsIsRegistered() {
        #expect(BlueZReplies.registerAgent(.success(())) == nil)
        #expect(BlueZReplies.registerAgent(Self.error(BlueZ.ErrorName.alreadyExists)) == nil)
        #expect(BlueZReplies.registerAgent(Self.error(BlueZ.ErrorName.invalidArguments))?.name == BlueZ.ErrorName.invalidArguments)
    }
}
