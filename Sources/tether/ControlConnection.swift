import ArgumentParser
import Configuration
import ControlAPI
import DBus
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Connects the CLI to a daemon's control object on the system bus (or
/// DBUS_SYSTEM_BUS_ADDRESS), turning failures into messages and exit codes.
enum ControlConnection {
    static func connect(_ instance: InstanceName) async -> ControlClient {
        let bus: Bus
        do {
            bus = try await Bus.system()
        } catch {
            fail("\(error)", code: ClientExit.failure)
        }
        return ControlClient(bus: bus, address: ControlAddress(instance: instance))
    }

    /// Prints a client failure and exits with the code it calls for.
    static func exit(_ failure: ControlClient.Failure) -> Never {
        switch failure {
        case .notRunning: fail(failure.description, code: ClientExit.notRunning)
        case .accessDenied: fail(failure.description, code: ClientExit.accessDenied)
        case .notAnswering, .refused, .bus: fail(failure.description, code: ClientExit.failure)
        }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        StandardError.emit("tether: \(message)\n")
        #if canImport(Glibc)
        Glibc.exit(code)
        #elseif canImport(Musl)
        Musl.exit(code)
        #endif
    }
}
