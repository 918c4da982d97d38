import Logging

extension Logger.Level {
    /// The syslog priority journald files the entry under (what
    /// `journalctl -p` filters on). syslog has no level below debug, so
    /// trace shares debug's 7.
    var syslogPriority: Int {
        switch self {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }
}
