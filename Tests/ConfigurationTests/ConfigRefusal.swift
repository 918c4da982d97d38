@testable import Configuration
import Testing

/// Parses `text` as the config file at `file`, expecting it to be refused:
/// returns the ConfigError to inspect, or records an issue at the caller's
/// line (and returns nil) when the text parsed.
func configRefusal(
    _ text: String, file: String = "/etc/tether/tether.toml", sourceLocation: SourceLocation = #_sourceLocation
) -> ConfigError? {
    do {
        let config = try TetherConfig.parse(text, file: file)
        Issue.record("expected the config to be refused, parsed \(config)", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}
