import DBus

/// Names of the simulator's control interface, served on a bus connection of
/// its own so that it survives simulated bluetoothd crashes.
public enum SimulatorControl {
    public static let busName = "io.tether.Simulator"
    public static let path: ObjectPath = "/io/tether/Simulator"
    public static let interface = "io.tether.Simulator1"
}

/// io.tether.Simulator1: the knobs of `Simulator` over D-Bus, for the CLI,
/// the demo and tests in other processes.
enum ControlInterface {
    struct Snapshot: Sendable, Equatable {
        var state: DongleState
        var sequence: UInt32
        var connects: UInt32

        var properties: [String: DBusValue] {
            ["State": .string(state.rawValue), "Sequence": .uint64(UInt64(sequence)), "Connects": .uint32(connects)]
        }
    }

    static func interface(_ snapshot: Snapshot, simulator: Simulator) -> ExportedInterface {
        ExportedInterface(
            name: SimulatorControl.interface,
            methods: [
                "DropLink": .init(in: "s") { call in
                    await simulator.dropLink(reason: try call.argument(0).string ?? "")
                    return []
                },
                "Sleep": .init { _ in
                    await simulator.sleep()
                    return []
                },
                "Wake": .init { _ in
                    await simulator.wake()
                    return []
                },
                "FailConnects": .init(in: "uss") { call in
                    let count = try call.argument(0).int64 ?? 0
                    let name = try call.argument(1).string ?? ""
                    let message = try call.argument(2).string ?? ""
                    guard isValidErrorName(name) else {
                        throw DBusError.remote(name: DBusErrorName.invalidArgs, message: "invalid error name \"\(name)\"")
                    }
                    await simulator.failNextConnects(Int(count), errorName: name, message: message)
                    return []
                },
                "SetConnectLatency": .init(in: "u") { call in
                    await simulator.setConnectLatency(.milliseconds(try call.argument(0).int64 ?? 0))
                    return []
                },
                "SetNotifyRate": .init(in: "d") { call in
                    let rate = try call.argument(0).double ?? -1
                    guard rate.isFinite, rate >= 0 else {
                        throw DBusError.remote(name: DBusErrorName.invalidArgs, message: "the rate must be a finite number ≥ 0")
                    }
                    await simulator.setNotifyRate(rate)
                    return []
                },
                "HangApplication": .init(in: "b") { call in
                    await simulator.hangApplication(attAnswers: try call.argument(0).bool ?? true)
                    return []
                },
                "ResumeApplication": .init { _ in
                    await simulator.resumeApplication()
                    return []
                },
                "ChangeGattLayout": .init { _ in
                    await simulator.changeGattLayout()
                    return []
                },
                "SetStaleDevice": .init(in: "b") { call in
                    await simulator.setStaleDevice(try call.argument(0).bool ?? true)
                    return []
                },
                "RemoveAdapter": .init { _ in
                    await simulator.removeAdapter()
                    return []
                },
                "AddAdapter": .init(in: "ss") { call in
                    let name = try call.argument(0).string ?? ""
                    let address = try call.argument(1).string ?? ""
                    do {
                        try await simulator.addAdapter(name: name, address: address)
                    } catch {
                        throw DBusError.remote(name: DBusErrorName.invalidArgs, message: "AddAdapter wants a name like hci1 and an address: \(name) \(address)")
                    }
                    return []
                },
                "SetAdapterPowered": .init(in: "b") { call in
                    await simulator.setAdapterPowered(try call.argument(0).bool ?? true)
                    return []
                },
                "Rfkill": .init(in: "s") { call in
                    let blocks = try call.argument(0).string ?? ""
                    guard let (soft, hard) = rfkillBlocks[blocks.replacingOccurrences(of: "-held", with: "")] else {
                        throw DBusError.remote(
                            name: DBusErrorName.invalidArgs, message: "Rfkill wants none, soft, hard, soft+hard or soft-held: \(blocks)"
                        )
                    }
                    await simulator.setRfkill(soft: soft, hard: hard, held: blocks.hasSuffix("-held"))
                    return []
                },
                "Lockup": .init(in: "bb") { call in
                    await simulator.setLockup(try call.argument(0).bool ?? true, clearsOnPowerCycle: try call.argument(1).bool ?? true)
                    return []
                },
                "Crash": .init(in: "u") { call in
                    await simulator.crash(restartAfter: .milliseconds(try call.argument(0).int64 ?? 0))
                    return []
                },
                "Hang": .init(in: "u") { call in
                    await simulator.hang(for: .milliseconds(try call.argument(0).int64 ?? 0))
                    return []
                },
                "SetOtherAdvertisers": .init(in: "u") { call in
                    await simulator.setOtherAdvertisers(Int(try call.argument(0).int64 ?? 0))
                    return []
                },
                "StallScan": .init(in: "s") { call in
                    let mode = try call.argument(0).string ?? ""
                    guard mode == "none" || Simulator.ScanStall(rawValue: mode) != nil else {
                        throw DBusError.remote(name: DBusErrorName.invalidArgs, message: "StallScan wants none, until-restart or until-reset, not \(mode.debugDescription)")
                    }
                    await simulator.stallScan(Simulator.ScanStall(rawValue: mode))
                    return []
                },
                "SetBootloader": .init(in: "b") { call in
                    await simulator.setBootloader(try call.argument(0).bool ?? false)
                    return []
                },
                "ForgetKeys": .init { _ in
                    await simulator.forgetKeys()
                    return []
                },
                "Restart": .init(in: "u") { call in
                    await simulator.restart(after: .milliseconds(try call.argument(0).int64 ?? 0))
                    return []
                },
            ],
            properties: snapshot.properties
        )
    }

    /// `Rfkill`'s argument: the blocks it leaves (soft, hard); `-held` after
    /// one with soft (`soft-held`) holds the soft block against clients.
    static let rfkillBlocks: [String: (Bool, Bool)] = [
        "none": (false, false), "soft": (true, false), "hard": (false, true), "soft+hard": (true, true),
    ]

    /// The D-Bus rules for error names (two or more elements of
    /// `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes): libdbus would reject the
    /// reply otherwise, and the failed Connect would turn into a generic error.
    static func isValidErrorName(_ name: String) -> Bool {
        guard name.utf8.count <= 255 else { return false }
        let elements = name.split(separator: ".", omittingEmptySubsequences: false)
        return elements.count >= 2 && elements.allSatisfy { element in
            let bytes = Array(element.utf8)
            guard let first = bytes.first, !isDigit(first) else { return false }
            return bytes.allSatisfy { isDigit($0) || isLetter($0) || $0 == UInt8(ascii: "_") }
        }
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }
}
