import Logging

/// The daemon's log lines, into the simulation's trace (the last of them
/// are printed with a violation; a replay prints them all): what an
/// operator would read in the journal, at the virtual time it was written.
struct TraceLogHandler: LogHandler {
    let simulation: Simulation
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var line = "\(event.message)"
        if let event = event.metadata?["event"] { line += " event=\(event)" }
        simulation.record(.log(event.level, line))
    }
}
