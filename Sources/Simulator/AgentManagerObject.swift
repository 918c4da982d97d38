import DBus

/// org.bluez.AgentManager1 on `/org/bluez`, as bluetoothd 5.66 serves it
/// (src/agent.c). Like the real one, the object is in GetManagedObjects
/// (with no properties).
enum AgentManagerObject {
    static let path: ObjectPath = "/org/bluez"
    static let interfaceName = "org.bluez.AgentManager1"
    /// Agents' interface: what bluetoothd calls on them.
    static let agentInterface = "org.bluez.Agent1"

    static func interface(simulator: Simulator) -> ExportedInterface {
        ExportedInterface(
            name: interfaceName,
            methods: [
                "RegisterAgent": .init(in: "os") { call in
                    guard let path = try call.argument(0).objectPath, let text = try call.argument(1).string else {
                        throw BlueZFault.invalidArguments()
                    }
                    try await simulator.registerAgent(owner: call.sender, path: path, capability: text)
                    return []
                },
                "UnregisterAgent": .init(in: "o") { call in
                    guard let path = try call.argument(0).objectPath else { throw BlueZFault.invalidArguments() }
                    try await simulator.unregisterAgent(owner: call.sender, path: path)
                    return []
                },
                "RequestDefaultAgent": .init(in: "o") { call in
                    guard let path = try call.argument(0).objectPath else { throw BlueZFault.invalidArguments() }
                    try await simulator.requestDefaultAgent(owner: call.sender, path: path)
                    return []
                },
            ]
        )
    }
}
