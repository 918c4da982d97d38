import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The bus driver, `org.freedesktop.DBus`: the methods `Bus` calls, with
/// dbus-daemon 1.14's replies, error names and texts (checked against it:
/// GetNameOwner of a name nobody owns, or of an invalid one, is
/// `NameHasNoOwner`; NameHasOwner of an invalid name is false; wrong
/// arguments are `InvalidArgs`), and its signals in its order: Hello's reply,
/// then NameAcquired; for a name changing hands NameLost to the old owner,
/// NameOwnerChanged to everyone whose rules match, NameAcquired to the new
/// owner, then the reply to whoever asked. Like dbus-daemon, it answers calls
/// that ask for no reply.
extension InProcessBusDaemon {
    // MARK: Methods

    /// The argument signatures of the driver's methods modelled here.
    private static let signatures: [String: String] = [
        "Hello": "", "RequestName": "su", "ReleaseName": "s", "GetNameOwner": "s", "NameHasOwner": "s",
        "ListNames": "", "GetConnectionUnixProcessID": "s", "GetConnectionUnixUser": "s", "AddMatch": "s",
        "RemoveMatch": "s", "GetId": "",
    ]

    /// Hello from a connection that has not said it yet.
    func welcome(_ id: Int, _ hello: OpaquePointer) {
        let unique = ":1.\(nextUniqueNumber)"
        nextUniqueNumber += 1
        clients[id]?.uniqueName = unique
        idsByUniqueName[unique] = id
        guard dbus_message_set_sender(hello, unique) != 0 else { return }
        sendReply(to: hello, from: id, [.string(unique)])
        emitNameOwnerChanged(unique, old: "", new: unique)
        sendDriverSignal("NameAcquired", [.string(unique)], to: id)
    }

    /// A message to the bus driver, stamped.
    func serveDriver(_ call: OpaquePointer, from id: Int) {
        guard dbus_message_get_type(call) == CDBUS_MESSAGE_TYPE_METHOD_CALL, let caller = clients[id],
              let unique = caller.uniqueName
        else { return }
        let member = dbus_message_get_member(call).map { String(cString: $0) } ?? ""
        let interface = dbus_message_get_interface(call).map { String(cString: $0) } ?? Self.driverName
        let signature = dbus_message_get_signature(call).map { String(cString: $0) } ?? ""
        if interface == Self.driverName, let wanted = Self.signatures[member], signature != wanted {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs,
                             "Call to \(member) has wrong args (\(signature), expected \(wanted))\n")
        }
        let arguments = (try? Marshalling.readBody(of: call)) ?? []
        let name = arguments.first?.string ?? ""
        switch (interface, member) {
        case (StandardInterface.peer, "Ping"):
            sendReply(to: call, from: id, [])
        case (Self.driverName, "Hello"):
            sendError(replyingTo: call, to: id, DBusErrorName.failed, "Already handled an Hello message")
        case (Self.driverName, "RequestName"):
            guard case .uint32(let flags)? = arguments.last else { return }
            requestName(name, flags: flags, call, from: id, unique)
        case (Self.driverName, "ReleaseName"):
            releaseName(name, call, from: id)
        case (Self.driverName, "GetNameOwner"):
            if let ownerName = name == Self.driverName ? name : owner(of: name) {
                sendReply(to: call, from: id, [.string(ownerName)])
            } else {
                sendError(replyingTo: call, to: id, DBusErrorName.nameHasNoOwner,
                          "Could not get owner of name '\(name)': no such name")
            }
        case (Self.driverName, "NameHasOwner"):
            sendReply(to: call, from: id, [.boolean(name == Self.driverName || owner(of: name) != nil)])
        case (Self.driverName, "ListNames"):
            let all = [Self.driverName] + connectionNames + names.names.sorted()
            sendReply(to: call, from: id, [.strings(all)])
        case (Self.driverName, "GetConnectionUnixProcessID"):
            if let ownerName = owner(of: name), let ownerID = idsByUniqueName[ownerName], let client = clients[ownerID] {
                sendReply(to: call, from: id, [.uint32(client.processID)])
            } else {
                sendError(replyingTo: call, to: id, DBusErrorName.nameHasNoOwner,
                          "Could not get PID of name '\(name)': no such name")
            }
        case (Self.driverName, "GetConnectionUnixUser"):
            if owner(of: name) != nil {
                sendReply(to: call, from: id, [.uint32(getuid())])
            } else {
                sendError(replyingTo: call, to: id, DBusErrorName.nameHasNoOwner,
                          "Could not get UID of name '\(name)': no such name")
            }
        case (Self.driverName, "AddMatch"):
            addMatch(name, call, from: id, unique)
        case (Self.driverName, "RemoveMatch"):
            removeMatch(name, call, from: id)
        case (Self.driverName, "GetId"):
            sendReply(to: call, from: id, [.string("0123456789abcdef0123456789abcdef")])
        default:
            sendError(replyingTo: call, to: id, DBusErrorName.unknownMethod,
                      "org.freedesktop.DBus does not understand message \(member)")
        }
    }

    private func requestName(_ name: String, flags: UInt32, _ call: OpaquePointer, from id: Int, _ unique: String) {
        guard NameValidation.isValidBusName(name) else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs, "Requested bus name \"\(name)\" is not valid")
        }
        guard !name.hasPrefix(":") else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs,
                             "Cannot acquire a service starting with ':' such as \"\(name)\"")
        }
        guard name != Self.driverName else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs,
                             "Connection \"\(unique)\" is not allowed to own the service \"\(name)\"because it is reserved for D-Bus' use only")
        }
        let (reply, change) = names.request(name, by: id, flags: flags)
        if let change { announce(change) }
        sendReply(to: call, from: id, [.uint32(reply.rawValue)])
    }

    private func releaseName(_ name: String, _ call: OpaquePointer, from id: Int) {
        guard NameValidation.isValidBusName(name) else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs, "Given bus name \"\(name)\" is not valid")
        }
        guard !name.hasPrefix(":") else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs,
                             "Cannot release a service starting with ':' such as \"\(name)\"")
        }
        guard name != Self.driverName else {
            return sendError(replyingTo: call, to: id, DBusErrorName.invalidArgs,
                             "Cannot release the \(name) service because it is owned by the bus")
        }
        let (reply, change) = names.release(name, by: id)
        if let change { announce(change) }
        sendReply(to: call, from: id, [.uint32(reply.rawValue)])
    }

    private func addMatch(_ text: String, _ call: OpaquePointer, from id: Int, _ unique: String) {
        let rule: DaemonMatchRule
        do {
            rule = try DaemonMatchRule(parsing: text)
        } catch {
            return sendError(replyingTo: call, to: id, DBusErrorName.matchRuleInvalid, error.text)
        }
        guard let count = clients[id]?.matchRules.count, count < maxMatchRulesPerConnection else {
            return sendError(replyingTo: call, to: id, DBusErrorName.limitsExceeded,
                             "Connection \"\(unique)\" is not allowed to add more match rules (increase limits in configuration file if required; max_match_rules_per_connection=\(maxMatchRulesPerConnection))")
        }
        clients[id]?.matchRules.append(rule)
        sendReply(to: call, from: id, [])
    }

    private func removeMatch(_ text: String, _ call: OpaquePointer, from id: Int) {
        let rule: DaemonMatchRule
        do {
            rule = try DaemonMatchRule(parsing: text)
        } catch {
            return sendError(replyingTo: call, to: id, DBusErrorName.matchRuleInvalid, error.text)
        }
        guard let index = clients[id]?.matchRules.lastIndex(of: rule) else {
            return sendError(replyingTo: call, to: id, DBusErrorName.matchRuleNotFound,
                             "The given match rule wasn't found and can't be removed")
        }
        clients[id]?.matchRules.remove(at: index)
        sendReply(to: call, from: id, [])
    }

    // MARK: Signals

    /// A name changed hands: NameLost (not to a connection `leaving`),
    /// NameOwnerChanged, NameAcquired.
    func announce(_ change: BusNameRegistry.Change, leaving: Int? = nil) {
        let old = change.oldOwner.flatMap { clients[$0]?.uniqueName }
        let new = change.newOwner.flatMap { clients[$0]?.uniqueName }
        if let oldOwner = change.oldOwner, oldOwner != leaving {
            sendDriverSignal("NameLost", [.string(change.name)], to: oldOwner)
        }
        emitNameOwnerChanged(change.name, old: old ?? "", new: new ?? "")
        if let newOwner = change.newOwner { sendDriverSignal("NameAcquired", [.string(change.name)], to: newOwner) }
    }

    func emitNameOwnerChanged(_ name: String, old: String, new: String) {
        guard let signal = driverMessage(signal: "NameOwnerChanged", [.string(name), .string(old), .string(new)]) else { return }
        broadcast(signal, from: nil)
        dbus_message_unref(signal)
    }

    /// A unicast signal from the driver (NameAcquired, NameLost).
    private func sendDriverSignal(_ member: String, _ body: [DBusValue], to id: Int) {
        guard let client = clients[id], let unique = client.uniqueName,
              let signal = driverMessage(signal: member, body, destination: unique)
        else { return }
        deliver(signal, to: client)
        dbus_message_unref(signal)
    }

    // MARK: Replies

    func sendReply(to call: OpaquePointer, from id: Int, _ body: [DBusValue]) {
        guard let reply = dbus_message_new_method_return(call) else { return }
        defer { dbus_message_unref(reply) }
        guard (try? Marshalling.append(body, to: reply)) != nil else { return }
        stampFromDriver(reply)
        if let client = clients[id] { deliver(reply, to: client) }
    }

    /// An error from the driver about `message` (a call or anything
    /// refused), to the connection that sent it.
    func sendError(replyingTo message: OpaquePointer, to id: Int, _ name: String, _ text: String) {
        guard let error = dbus_message_new_error(message, name, text) else { return }
        stampFromDriver(error)
        if let client = clients[id] { deliver(error, to: client) }
        dbus_message_unref(error)
    }

    /// dbus-daemon's answer to a caller whose callee left without replying.
    func sendNoReply(to call: CallKey) {
        guard let caller = clients[call.caller], let unique = caller.uniqueName,
              let error = dbus_message_new(CDBUS_MESSAGE_TYPE_ERROR)
        else { return }
        defer { dbus_message_unref(error) }
        guard dbus_message_set_error_name(error, DBusErrorName.noReply) != 0,
              dbus_message_set_reply_serial(error, call.serial) != 0,
              dbus_message_set_destination(error, unique) != 0,
              (try? Marshalling.append([.string("Message recipient disconnected from message bus without replying")], to: error)) != nil
        else { return }
        dbus_message_set_no_reply(error, 1)
        stampFromDriver(error)
        deliver(error, to: caller)
    }

    private func driverMessage(signal member: String, _ body: [DBusValue], destination: String? = nil) -> OpaquePointer? {
        guard let signal = dbus_message_new_signal(Self.driverPath, Self.driverName, member) else { return nil }
        guard destination.map({ dbus_message_set_destination(signal, $0) != 0 }) ?? true,
              (try? Marshalling.append(body, to: signal)) != nil
        else {
            dbus_message_unref(signal)
            return nil
        }
        stampFromDriver(signal)
        return signal
    }

    /// The driver's sender and the next of its serials; then nothing changes it.
    private func stampFromDriver(_ message: OpaquePointer) {
        driverSerial = driverSerial == .max ? 1 : driverSerial + 1
        _ = dbus_message_set_sender(message, Self.driverName)
        dbus_message_set_serial(message, driverSerial)
        dbus_message_lock(message)
    }
}
