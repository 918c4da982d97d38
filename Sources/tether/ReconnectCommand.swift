import ArgumentParser
import CommandLineArguments
import Configuration
import ControlAPI
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkSupervisor

struct ReconnectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconnect",
        abstract: "Drop the link and reconnect now, with a fresh retry window.",
        discussion: """
            Calls Reconnect() on io.tether.Tether1; it returns once the first attempt has started. \
            Only root and members of group 'tether-admin' may (the D-Bus policy io.tether.Tether.conf), at most 3 times in any 30 s. \
            With --wait, shows each state change and exits 0 once the daemon is online again, or 1 with \
            the last error after --timeout. Exit status: 0 done, 1 failed or timed out, 3 daemon not running, \
            4 permission denied.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Flag(help: "Wait until the daemon is online again, showing progress.")
    var wait = false

    @Option(help: "How long --wait waits (e.g. 60s, 5m).")
    var timeout = DurationArgument(.seconds(60))

    func validate() throws {
        guard timeout.duration > .zero else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        let instance = try instanceOptions.resolved()
        let client = await ControlConnection.connect(instance)
        do {
            // Subscribe before asking, so that no transition is missed.
            let changes = wait ? try await client.stateChanges() : nil
            let start = ContinuousClock.now
            let attempt = try await client.reconnect()
            print(attempt > 0 ? "reconnecting: attempt \(attempt) started" : "reconnect requested; the attempt starts shortly")
            guard let changes else { return }
            let online = await Self.waitForOnline(changes, timeout: timeout.duration, start: start)
            if online {
                print("online again after \(DurationText.rounded(start.duration(to: .now)))")
                return
            }
            let status = try? await client.status()
            var message = "not online after \(DurationText.format(timeout.duration))"
            if let status {
                message += "; state \(status.state)"
                if let error = status.lastError { message += ", last error: \(error)" }
            }
            ControlConnection.fail(message, code: ClientExit.failure)
        } catch {
            ControlConnection.exit(error)
        }
    }

    /// Prints transitions until one reaches `online`; false on timeout or if
    /// the daemon goes away.
    private static func waitForOnline(
        _ changes: AsyncStream<(from: String, to: String, cause: String)>, timeout: Duration, start: ContinuousClock.Instant
    ) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await change in changes {
                    let at = DurationText.rounded(start.duration(to: .now))
                    print("  +\(at) \(change.from) → \(change.to): \(change.cause)")
                    if change.to == SupervisorState.online.rawValue { return true }
                }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}
