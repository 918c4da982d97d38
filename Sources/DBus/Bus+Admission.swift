import Synchronization

/// What a `Bus` lets in, decided from a message's header before its body is
/// decoded (see `MatchRule` for why the bus's routing proves nothing).
///
/// Invariants:
/// - a signal reaches a handler or a stream only if one of its rules admits
///   it, with the rule's sender checked against the stamped sender field;
///   every other signal is dropped unread, counted in `unreadDrops`;
/// - the owner of a well-known name a rule names is learnt only from the bus
///   driver: its `GetNameOwner` answer, then its `NameOwnerChanged` signals
///   (sender `org.freedesktop.DBus`, which no client can own), both taken on
///   the loop in the order they arrive, so a later change is never
///   overwritten by an earlier answer;
/// - a method call is refused from its header when nothing here would serve
///   it (no such object, method or signature) or when its caller already has
///   `callsInFlightPerCaller` handlers running; its body is never read.
extension Bus {
    /// Signals dropped unread because no rule admitted them, and method calls
    /// refused from their header alone.
    public nonisolated var unreadDrops: (signals: Int, calls: Int) {
        (connection.signalsDroppedUnread.load(ordering: .relaxed), connection.callsRefusedUnread.load(ordering: .relaxed))
    }

    /// The unique owner of `name` as the bus driver last said, for a name a
    /// subscribed rule names as its sender; nil while nobody owns it, or
    /// while it is not tracked or not known yet.
    public func currentOwner(of name: String) -> String? {
        guard case .known(let owner)? = ownerTracking[name] else { return nil }
        return owner
    }

    // MARK: Owners

    /// The rule that keeps `name`'s owner known.
    static func ownerRule(_ name: String) -> MatchRule {
        MatchRule(
            sender: daemonName, interface: daemonName, member: "NameOwnerChanged", path: daemonPath, arg0: name,
            signature: "sss"
        )
    }

    /// Starts tracking the owner of every well-known name `rules` trust, and
    /// returns once each owner is known (or the bus said nobody owns it).
    func trackOwners(for rules: [MatchRule]) async throws(DBusError) {
        for rule in rules {
            guard case .ownerOf(let name) = rule.trustedSender else { continue }
            try await trackOwner(of: name)
        }
    }

    private func trackOwner(of name: String) async throws(DBusError) {
        switch ownerTracking[name] {
        case .known?:
            return
        case .pending?:
            await withCheckedContinuation { continuation in
                if case .pending(let waiters)? = ownerTracking[name] {
                    ownerTracking[name] = .pending(waiters + [continuation])
                } else {
                    continuation.resume()
                }
            }
            return
        case nil:
            break
        }
        try NameCheck.busName(name)
        ownerTracking[name] = .pending([])
        do {
            _ = try await call(
                destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "AddMatch",
                [.string(Bus.ownerRule(name).description)]
            )
        } catch {
            resolveTracking(name, .known(nil))
            ownerTracking[name] = nil
            throw error
        }
        // Taken in the reply's completion, on the loop in arrival order: a
        // NameOwnerChanged that the bus sent after its answer comes after it.
        let answer: Result<String?, DBusError> = await withCheckedContinuation { continuation in
            startCall(
                destination: Bus.daemonName, path: Bus.daemonPath, interface: Bus.daemonName, method: "GetNameOwner",
                [.string(name)]
            ) { [weak self] result in
                let answer: Result<String?, DBusError>
                switch result {
                case .success(let reply):
                    answer = .success(reply.sender == Bus.daemonName ? reply.body.first?.string : nil)
                case .failure(.remote(let errorName, _)) where errorName == DBusErrorName.nameHasNoOwner:
                    answer = .success(nil)
                case .failure(let error):
                    answer = .failure(error)
                }
                self?.assumeIsolated { bus in
                    // A NameOwnerChanged may have settled it meanwhile; the answer is older.
                    if case .pending? = bus.ownerTracking[name], case .success(let owner) = answer {
                        bus.resolveTracking(name, .known(owner))
                    }
                }
                continuation.resume(returning: answer)
            }
        }
        if case .failure(let error) = answer {
            resolveTracking(name, .known(nil))
            ownerTracking[name] = nil
            throw error
        }
    }

    private func resolveTracking(_ name: String, _ state: OwnerTracking) {
        if case .pending(let waiters)? = ownerTracking[name] {
            ownerTracking[name] = state
            for waiter in waiters { waiter.resume() }
        } else {
            ownerTracking[name] = state
        }
    }

    /// The bus driver's word that a tracked name changed hands.
    func noteOwnerChange(_ signal: Message) {
        guard Bus.isOwnerChange(signal), case .string(let name)? = signal.body.first, ownerTracking[name] != nil,
              case .string(let newOwner)? = signal.body.last
        else { return }
        resolveTracking(name, .known(newOwner.isEmpty ? nil : newOwner))
    }

    private static func isOwnerChange(_ signal: some SignalFields) -> Bool {
        signal.isSignal && signal.hasSender(daemonName) && signal.hasInterface(daemonName)
            && signal.hasMember("NameOwnerChanged") && signal.hasSignature("sss")
    }

    // MARK: Admission

    /// Whether any rule here admits `signal`, from its header (and first
    /// argument) alone; the owner changes of tracked names always do.
    func admits(_ signal: RawSignal) -> Bool {
        if Bus.isOwnerChange(signal), ownerTracking.keys.contains(where: { signal.hasFirstStringArgument($0) }) {
            return true
        }
        let owner = { (name: String) in self.currentOwner(of: name) }
        for (_, entry) in signalHandlers where entry.rules.contains(where: { $0.matches(signal, owner: owner) }) {
            return true
        }
        for (_, subscription) in subscriptions where subscription.rules.contains(where: { $0.matches(signal, owner: owner) }) {
            return true
        }
        return false
    }

    /// Nil if something here serves `call` (its header: the body is not
    /// read yet); else the error it is answered with.
    func admits(call: Message) -> CallRefusal? {
        guard let path = call.path, let member = call.member else {
            return CallRefusal(name: DBusErrorName.unknownMethod, text: "a method call without a path or member")
        }
        let signature = call.signature
        func expect(_ wanted: String) -> CallRefusal? {
            signature == wanted
                ? nil
                : CallRefusal(name: DBusErrorName.invalidArgs, text: "Expected signature \"\(wanted)\", got \"\(signature)\"")
        }
        switch (call.interface, member) {
        case (StandardInterface.peer?, "Ping"):
            return expect("")
        case (StandardInterface.introspectable?, "Introspect"), (nil, "Introspect"):
            return expect("")
        case (StandardInterface.objectManager?, "GetManagedObjects") where registry.managerPaths.contains(path):
            return expect("")
        case (StandardInterface.properties?, "Get"):
            return registry.objects[path] == nil ? unknownObject(path) : expect("ss")
        case (StandardInterface.properties?, "GetAll"):
            return registry.objects[path] == nil ? unknownObject(path) : expect("s")
        case (StandardInterface.properties?, "Set"):
            guard registry.objects[path] != nil else { return unknownObject(path) }
            return expect("ssv") ?? busyCaller(call)
        default:
            switch exportedMethod(for: call, path: path, member: member) {
            case .success: return busyCaller(call)
            case .failure(let refusal): return refusal
            }
        }
    }

    /// The exported method `call` names, with the signature it takes: the
    /// one lookup behind both the header check and serving the call.
    func exportedMethod(for call: Message, path: ObjectPath, member: String) -> Result<ExportedInterface.Method, CallRefusal> {
        guard let interfaces = registry.objects[path] else { return .failure(unknownObject(path)) }
        let candidates = call.interface.map { name in interfaces[name].map { [$0] } ?? [] } ?? Array(interfaces.values)
        guard let method = candidates.lazy.compactMap({ $0.methods[member] }).first else {
            let text = "Method \"\(member)\" with signature \"\(call.signature)\" on interface \"\(call.interface ?? "")\" doesn't exist"
            return .failure(CallRefusal(name: DBusErrorName.unknownMethod, text: text))
        }
        guard method.inSignature == call.signature else {
            let text = "Expected signature \"\(method.inSignature)\", got \"\(call.signature)\""
            return .failure(CallRefusal(name: DBusErrorName.invalidArgs, text: text))
        }
        return .success(method)
    }

    private func unknownObject(_ path: ObjectPath) -> CallRefusal {
        CallRefusal(name: DBusErrorName.unknownObject, text: "No such object \(path)")
    }

    /// A caller with `callsInFlightPerCaller` handlers still running waits
    /// for them before it starts another.
    private func busyCaller(_ call: Message) -> CallRefusal? {
        guard (callsInFlight[call.sender ?? ""] ?? 0) >= callsInFlightPerCaller else { return nil }
        return CallRefusal(
            name: DBusErrorName.limitsExceeded,
            text: "\(callsInFlightPerCaller) calls of yours are still being served; wait for their replies"
        )
    }
}
