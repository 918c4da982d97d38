import ArgumentParser
import EventLoop

/// A command-line program's `main` without an `async main`: parses the
/// arguments, lets the caller prepare the process before its first thread
/// starts, runs the command as the root task (`EventLoop.runRootTask`) and
/// exits as ArgumentParser would (help, usage errors, `ExitCode`).
public enum CommandMain {
    /// - Parameters:
    ///   - executor: what the command's tasks prefer; nil: a loop of their own.
    ///   - beforeThreads: called with the parsed command before any thread
    ///     starts (`TerminationSignal.takeOver` for the commands that wait for one).
    public static func run<Root: ParsableCommand>(
        _ root: Root.Type, loopName: String, preferring executor: (any TaskExecutor)? = nil,
        beforeThreads: (any ParsableCommand) -> Void = { _ in }
    ) -> Never {
        let command: any ParsableCommand
        do {
            command = try Root.parseAsRoot()
        } catch {
            Root.exit(withError: error)
        }
        beforeThreads(command)
        let parsed = Handed(value: command)
        let failure = EventLoop.runRootTask(name: loopName, preferring: executor) { () async -> Handed<any Error>? in
            var command = parsed.value
            do {
                if var asynchronous = command as? any AsyncParsableCommand {
                    try await asynchronous.run()
                } else {
                    try command.run()
                }
                return nil
            } catch {
                return Handed(value: error)
            }
        }
        Root.exit(withError: failure?.value)
    }
}

/// A value handed from one thread to another once, with nothing else
/// touching it meanwhile (the parsed command, the error it threw).
private struct Handed<Value>: @unchecked Sendable {
    let value: Value
}
