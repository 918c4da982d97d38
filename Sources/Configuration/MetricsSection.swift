/// `[metrics]`: Prometheus metrics in text files for node_exporter's
/// textfile collector. Both daemons have no listening socket (`tether run`
/// has no network at all), so they write files instead of serving /metrics.
public struct MetricsSection: Sendable, Equatable {
    /// `tether run`'s file; nil: off.
    public var textfile: String?
    /// `tether forward`'s file; nil: off.
    public var forwardTextfile: String?
    /// How often each file is rewritten (and once more at stop).
    public var interval: Duration

    public init(textfile: String? = nil, forwardTextfile: String? = nil, interval: Duration = .seconds(15)) {
        self.textfile = textfile
        self.forwardTextfile = forwardTextfile
        self.interval = interval
    }
}

extension TetherConfig {
    static func parseMetrics(_ section: ConfigSection) throws(ConfigError) -> MetricsSection {
        try section.rejectUnknownKeys(ConfigKeys.metrics)
        var result = MetricsSection()
        for (key, keyPath) in [("textfile", \MetricsSection.textfile), ("forward_textfile", \.forwardTextfile)] {
            guard let path = try section.string(key), !path.isEmpty else { continue }
            guard path.hasPrefix("/") else {
                throw section.error(key, "must be an absolute path, got \(ConfigContext.quoted(path))")
            }
            // node_exporter's textfile collector reads *.prom and nothing else.
            guard path.hasSuffix(".prom"), !path.hasSuffix("/.prom") else {
                throw section.error(key, "must name a file ending in .prom (node_exporter reads only those), got \(ConfigContext.quoted(path))")
            }
            result[keyPath: keyPath] = path
        }
        if let textfile = result.textfile, textfile == result.forwardTextfile {
            throw section.error("forward_textfile", "must differ from textfile: each process writes its own file")
        }
        if let interval = try section.duration("interval") {
            guard interval >= .seconds(1), interval <= .seconds(3600) else {
                throw section.error("interval", "must be from 1s to 1h")
            }
            result.interval = interval
        }
        return result
    }
}
