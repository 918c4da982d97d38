import BlueZ
import DBus
import EventLoop

/// Agents, Device1.Pair, bonds and a dongle that lost its keys, as BlueZ
/// 5.66 with a Linux ≥ 5.8 kernel handles them (docs/pairing-research.md
/// §1–§4).
///
/// - AgentManager1 (`/org/bluez`): one agent per client (its unique name);
///   the first registered becomes the default; an agent goes with its
///   client's connection, and all of them with bluetoothd.
/// - Pair(): InProgress while one runs, AlreadyExists on a bonded device;
///   an unconnected device is connected first. The agent is the caller's,
///   else the default one. Just Works is accepted without an agent call,
///   but only if some agent exists (bluez#63); passkey entry asks the
///   agent's `RequestPasskey`, and needs a KeyboardOnly/KeyboardDisplay
///   agent: with another capability SMP falls back to Just Works, which the
///   passkey dongle (MITM required) refuses. `Paired`/`Bonded` change
///   before the reply, once services are resolved (pending_paired).
/// - An encrypted characteristic accessed on an unencrypted link:
///   bluetoothd raises security and the kernel pairs as initiator with the
///   default agent (Just Works: `RequestAuthorization`; passkey:
///   `RequestPasskey`); the request then completes, or fails with
///   NotPermitted "Not paired". Writes without response are never raised:
///   the dongle drops them.
/// - A reconnect to a bonded device is encrypted with the stored key. If
///   the dongle forgot it (`forgetKeys()`), the kernel drops every new link
///   for authentication failure (reason 4 on the management socket) right
///   after Connected=true, and Connect() fails "le-connection-abort-by-local";
///   Paired stays true until RemoveDevice.
extension Simulator {
    struct RegisteredAgent: Sendable, Equatable {
        let owner: String
        let path: ObjectPath
        let capability: AgentCapability
    }

    /// How one SMP pairing ended: the error is what Pair() answers.
    enum PairingOutcome: Sendable {
        case paired
        case failed(DBusError)
    }

    /// An agent's answer to one request.
    enum AgentAnswer: Sendable {
        case reply([DBusValue])
        case error(DBusError)
        /// bluetoothd gave up on it (reason: link-lost, agent-gone, …).
        case aborted(String)
    }

    struct PendingAgentRequest {
        let id: Int
        let agent: RegisteredAgent
        let continuation: CheckedContinuation<AgentAnswer, Never>
        var call: Task<Void, Never>?
    }

    var defaultAgent: RegisteredAgent? {
        defaultAgentOwners.first.flatMap { agents[$0] }
    }

    // MARK: Knobs and observation

    /// The dongle's factory reset: it forgets its bond, bluetoothd does not
    /// (Paired and Bonded stay true). A link up now stays as it is; from the
    /// next connection on, the kernel drops every link for authentication
    /// failure until the device is removed and paired again.
    public func forgetKeys() {
        guard !stopped else { return }
        dongleHasKey = false
        log.record(.keysForgotten)
    }

    /// bluetoothd's Device1.Paired.
    public var isPaired: Bool { paired }
    /// bluetoothd's Device1.Bonded.
    public var isBonded: Bool { bonded }
    /// bluetoothd's Device1.Trusted.
    public var isTrusted: Bool { trusted }
    /// Whether the dongle still holds the key of its bond.
    public var dongleHoldsKey: Bool { dongleHasKey }

    // MARK: AgentManager1

    func registerAgent(owner: String, path: ObjectPath, capability text: String) async throws {
        try ensureRunning()
        guard agents[owner] == nil else { throw BlueZFault.alreadyExists }
        guard let capability = AgentCapability(parsing: text) else { throw BlueZFault.invalidArguments() }
        agents[owner] = RegisteredAgent(owner: owner, path: path, capability: capability)
        let becomesDefault = defaultAgentOwners.isEmpty
        if becomesDefault { defaultAgentOwners = [owner] }
        log.record(.agentRegistered) {
            $0.client = owner
            $0.type = capability.rawValue
            $0.on = becomesDefault
        }
    }

    func requestDefaultAgent(owner: String, path: ObjectPath) async throws {
        try ensureRunning()
        guard agents[owner]?.path == path else { throw BlueZFault.doesNotExist }
        defaultAgentOwners.removeAll { $0 == owner }
        defaultAgentOwners.insert(owner, at: 0)
        log.record(.agentRegistered) {
            $0.client = owner
            $0.type = agents[owner]?.capability.rawValue
            $0.on = true
            $0.reason = "default"
        }
    }

    func unregisterAgent(owner: String, path: ObjectPath) async throws {
        try ensureRunning()
        guard agents[owner]?.path == path else { throw BlueZFault.doesNotExist }
        removeAgent(owner, reason: "unregistered")
    }

    /// Forgets `owner`'s agent; a request waiting on it is given up (with a
    /// Cancel() to the agent while its owner is still on the bus).
    func removeAgent(_ owner: String, reason: String) {
        guard agents.removeValue(forKey: owner) != nil else { return }
        defaultAgentOwners.removeAll { $0 == owner }
        log.record(.agentUnregistered) {
            $0.client = owner
            $0.reason = reason
        }
        if agentRequest?.agent.owner == owner {
            abortAgentRequest(reason: "agent-gone", tellAgent: reason == "unregistered")
        }
    }

    /// bluetoothd exits: its agents are gone (clients must register again),
    /// and so is any pairing it was running.
    func forgetAgents(reason: String) {
        abortAgentRequest(reason: reason, tellAgent: false)
        for owner in agents.keys.sorted() {
            log.record(.agentUnregistered) {
                $0.client = owner
                $0.reason = reason
            }
        }
        agents.removeAll()
        defaultAgentOwners.removeAll()
        pairCall = nil
    }

    /// bluetoothd's record of the device is deleted (RemoveDevice, another
    /// controller). The dongle keeps whatever it had.
    func forgetBond() {
        paired = false
        bonded = false
        trusted = false
        linkEncrypted = false
    }

    // MARK: Device1.Pair

    func pairDevice(client: String) async throws {
        try ensureRunning()
        log.record(.pairRequest) { $0.client = client }
        let outcome: PairingOutcome
        do {
            outcome = try await performPair(client: client)
        } catch {
            // Refused before any pairing began (InProgress, AlreadyExists,
            // the connection failing); the pairing logs its own failures.
            log.record(.pairingFailed) {
                $0.client = client
                $0.error = error.name
                $0.message = error.message
                $0.reason = "not-started"
            }
            throw error
        }
        if case .failed(let error) = outcome { throw error }
    }

    private func performPair(client: String) async throws(DBusError) -> PairingOutcome {
        guard powered else { throw BlueZFault.notReady }
        guard pairCall == nil, pairing == nil else { throw BlueZFault.inProgress }
        guard !(paired && bonded) else { throw BlueZFault.alreadyExists }
        let id = makeWaitID()
        pairCall = (id, client)
        defer {
            if pairCall?.id == id { pairCall = nil }
        }
        let startGeneration = generation
        if dongle.state != .connected, !ghostLink {
            // MGMT Pair Device on an unconnected LE device: the kernel
            // connects first (as Connect does), then pairs.
            do {
                try await performConnect(client: client, started: startConnect(client: client))
            } catch {
                if error == BlueZFault.notReady || error.name == BlueZ.ErrorName.inProgress { throw error }
                throw BlueZFault.connectionAttemptFailed
            }
        }
        guard generation == startGeneration, bluez != nil else { throw BlueZFault.authenticationCanceled }
        if ghostLink || lockup != nil {
            // The controller carries no SMP: the kernel's SMP timer (30 s,
            // like ATT's) runs out.
            await pause(options.attTimeout)
            throw BlueZFault.authenticationTimeout
        }
        guard dongle.state == .connected else { throw BlueZFault.authenticationCanceled }
        return await startPairing(agent: agents[client] ?? defaultAgent, pairCaller: client).value
    }

    // MARK: Security elevation (GATT)

    /// Lets a GATT request that is an ATT request through once the link is
    /// encrypted (or needs not be): bluetoothd's `change_security` after the
    /// dongle's Insufficient Encryption, the kernel pairing with the default
    /// agent, then the request sent again. A pairing under way (Pair's) is
    /// waited for. Fails with NotPermitted "Not paired" when the link stays
    /// unencrypted, Failed "Not connected" when it went meanwhile.
    func ensureEncryption() async throws(DBusError) {
        guard options.pairing.requiresEncryption, dongle.state == .connected, !linkEncrypted else { return }
        let link = linkID
        let task = pairing?.task ?? startPairing(agent: defaultAgent, pairCaller: nil)
        _ = await task.value
        guard link == linkID, dongle.state == .connected else { throw BlueZFault.gattNotConnected }
        guard linkEncrypted else { throw BlueZFault.notPaired }
    }

    /// Whether the dongle drops a write without response now: it wants
    /// encryption and the link has none (no error reaches the caller).
    var dongleDropsWriteCommands: Bool {
        options.pairing.requiresEncryption && dongle.state == .connected && !linkEncrypted
    }

    // MARK: SMP

    /// Starts one pairing on the current link; GATT requests can wait on it too.
    private func startPairing(agent: RegisteredAgent?, pairCaller: String?) -> Task<PairingOutcome, Never> {
        let id = makeWaitID()
        let link = linkID
        let task = spawn { await $0.exchangeKeys(id: id, agent: agent, pairCaller: pairCaller, link: link) }
        pairing = (id, task)
        return task
    }

    /// The pairing itself: the method follows from the dongle's needs and
    /// the agent's capability; the agent is asked what the method needs.
    private func exchangeKeys(id: Int, agent: RegisteredAgent?, pairCaller: String?, link: Int) async -> PairingOutcome {
        defer {
            if pairing?.id == id { pairing = nil }
        }
        let initiator = pairCaller == nil ? "security-elevation" : "pair"
        // Without a default agent bluetoothd turns the adapter's Bondable
        // off: the keys are then not kept past this connection.
        let bondable = defaultAgent != nil
        var method = "just-works"
        func fail(_ reason: String, _ error: DBusError) -> PairingOutcome {
            log.record(.pairingFailed) {
                $0.client = agent?.owner
                $0.type = method
                $0.reason = reason
                $0.error = error.name
                $0.message = error.message
            }
            return .failed(error)
        }
        func failure(for answer: AgentAnswer) -> PairingOutcome? {
            switch answer {
            case .reply:
                return nil
            case .error(let error):
                // Rejected, Canceled or anything else: INVALID_PASSKEY or a
                // negative confirm, which the kernel reports as AUTH_FAILED.
                return fail(error == .timeout ? "agent-timeout" : "agent-rejected", BlueZFault.authenticationFailed)
            case .aborted(let why):
                return fail(why, why == "link-lost" ? BlueZFault.authenticationCanceled : BlueZFault.authenticationFailed)
            }
        }
        switch options.pairing {
        case .passkey(let expected):
            // The dongle is DisplayOnly: a central that can type enters the
            // passkey; any other pairs Just Works, and the dongle, which
            // wants MITM protection, refuses that before any agent call.
            guard let agent, agent.capability.typesPasskey else {
                return fail(agent == nil ? "no-agent" : "mitm-required", BlueZFault.authenticationFailed)
            }
            method = "passkey"
            let answer = await askAgent(agent, "RequestPasskey", [.objectPath(devicePath)])
            if let failed = failure(for: answer) { return failed }
            guard case .reply(let body) = answer, body.count == 1, case .uint32(let typed) = body[0] else {
                return fail("agent-malformed", BlueZFault.authenticationFailed)
            }
            guard typed == expected else { return fail("wrong-passkey", BlueZFault.authenticationFailed) }
        case .justWorks, .none:
            // The kernel asks for a confirmation (confirm_hint=1) that
            // bluetoothd routes to an agent: none at all refuses it.
            guard let agent else { return fail("no-agent", BlueZFault.authenticationFailed) }
            if pairCaller != nil {
                // JustWorksRepairing=never: a Just Works re-pairing of a
                // device that is still paired is refused; otherwise Pair()
                // in progress means accepted without asking the agent.
                if paired { return fail("just-works-repairing", BlueZFault.authenticationFailed) }
            } else {
                let answer = await askAgent(agent, "RequestAuthorization", [.objectPath(devicePath)])
                if let failed = failure(for: answer) { return failed }
            }
        }
        guard link == linkID, dongle.state == .connected, !stopped else {
            return fail("link-lost", BlueZFault.authenticationCanceled)
        }
        paired = true
        bonded = bondable
        dongleHasKey = bondable
        linkEncrypted = true
        updateTelemetry()
        log.record(.paired) {
            $0.client = agent?.owner
            $0.type = method
            $0.reason = initiator
            $0.on = bondable
        }
        // bluetoothd announces Paired once services are resolved
        // (pending_paired), and answers Pair() after that.
        if pairCaller != nil { _ = await waitForServicesResolved() }
        await setDeviceProperties(["Paired": .boolean(paired), "Bonded": .boolean(bonded)])
        // The identity address came with the keys (SMP Identity Address
        // Information): bluetoothd moves the object's Address to it.
        if bonded, let identity = options.identityAddress, shownAddress != identity.uppercased() {
            shownAddress = identity.uppercased()
            await setDeviceProperties(["Address": .string(shownAddress), "AddressType": .string("public")])
        }
        guard paired else { return fail("link-lost", BlueZFault.authenticationCanceled) }
        return .paired
    }

    // MARK: Calling agents

    /// Calls `method` on the agent (Agent1 at its path, on its owner's
    /// unique name) and waits for its answer, at most `agentTimeout`; after
    /// a timeout the agent gets `Cancel()`. Link loss, the agent leaving and
    /// bluetoothd's exit end the wait early (`abortAgentRequest`).
    func askAgent(_ agent: RegisteredAgent, _ method: String, _ arguments: [DBusValue]) async -> AgentAnswer {
        guard let bus = bluez, !stopped, agentRequest == nil else { return .aborted("bluetoothd-busy") }
        let id = makeWaitID()
        let timeout = options.agentTimeout
        return await withCheckedContinuation { continuation in
            agentRequest = PendingAgentRequest(id: id, agent: agent, continuation: continuation)
            agentRequest?.call = spawn { simulator in
                let answer: AgentAnswer
                do throws(DBusError) {
                    answer = .reply(try await bus.call(
                        destination: agent.owner, path: agent.path, interface: AgentManagerObject.agentInterface,
                        method: method, arguments, timeout: timeout
                    ))
                } catch {
                    answer = .error(error)
                }
                await simulator.agentAnswered(id, answer)
            }
        }
    }

    private func agentAnswered(_ id: Int, _ answer: AgentAnswer) async {
        guard let request = agentRequest, request.id == id else { return }
        agentRequest = nil
        if case .error(.timeout) = answer { await sendCancel(to: request.agent) }
        request.continuation.resume(returning: answer)
    }

    /// Gives up the agent request under way, if any: its caller sees
    /// `.aborted(reason)`, and the agent a `Cancel()` if `tellAgent`.
    func abortAgentRequest(reason: String, tellAgent: Bool) {
        guard let request = agentRequest else { return }
        agentRequest = nil
        request.call?.cancel()
        if tellAgent, bluez != nil {
            spawn { await $0.sendCancel(to: request.agent) }
        }
        request.continuation.resume(returning: .aborted(reason))
    }

    /// Agent1.Cancel(): bluetoothd sends it without waiting for a reply.
    private func sendCancel(to agent: RegisteredAgent) async {
        try? await bluez?.callNoReply(
            destination: agent.owner, path: agent.path, interface: AgentManagerObject.agentInterface, method: "Cancel"
        )
    }

    // MARK: A dongle without its key

    /// The connection to a device bluetoothd is bonded with but whose dongle
    /// forgot the key: the link comes up (Connected=true), the kernel's
    /// encryption with the stored LTK gets Encryption Change 0x06 PIN or
    /// Key Missing, and about a connect latency later the kernel drops the
    /// link for authentication failure. Returns the Connect's error.
    func connectWithoutPeerKey(client: String) async -> DBusError {
        dongle.linkUp(at: loop.now)
        linkID += 1
        let link = linkID
        deviceKnown = true
        advertisingTask?.cancel()
        advertisingTask = nil
        log.record(.connected)
        await setDeviceProperties(["Connected": .boolean(true)], emitSignal: !options.connectedUnsignalled)
        await publishControl()
        // The Connect is still pending in bluetoothd: a second one is
        // InProgress, and Disconnect cuts it short.
        let waitID = makeWaitID()
        pendingConnect = PendingConnect(waitID: waitID, client: client)
        await pause(connectLatency, id: waitID)
        let cancelled = pendingConnect?.waitID != waitID
        if !cancelled { pendingConnect = nil }
        guard link == linkID, dongle.state == .connected, !stopped else { return BlueZFault.abortByLocal }
        if cancelled {
            await loseLink(reason: "disconnect", asleep: false, client: client)
            return BlueZFault.abortByLocal
        }
        log.record(.bondRejected) {
            $0.client = client
            $0.reason = "key-missing"
        }
        await loseLink(reason: "authentication", asleep: false)
        return BlueZFault.keyRefused
    }
}
