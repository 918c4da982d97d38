import ArgumentParser
import TetherCore

/// A duration on the command line, written as in the config: `250ms`, `5s`, `3m`.
struct DurationArgument: ExpressibleByArgument, Sendable, CustomStringConvertible {
    var duration: Duration

    init(_ duration: Duration) { self.duration = duration }

    init?(argument: String) {
        guard let parsed = DurationText.parse(argument) else { return nil }
        duration = parsed
    }

    var description: String { DurationText.format(duration) }
    var defaultValueDescription: String { description }
}
