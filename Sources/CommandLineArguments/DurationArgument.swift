import ArgumentParser
import Configuration

/// A duration on the command line, written as in the config: `250ms`, `5s`, `3m`.
public struct DurationArgument: ExpressibleByArgument, Sendable, CustomStringConvertible {
    public var duration: Duration

    public init(_ duration: Duration) { self.duration = duration }

    public init?(argument: String) {
        guard let parsed = DurationText.parse(argument) else { return nil }
        duration = parsed
    }

    public var description: String { DurationText.format(duration) }
    public var defaultValueDescription: String { description }
}
