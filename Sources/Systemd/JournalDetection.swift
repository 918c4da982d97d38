import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Decides between `JournalLogHandler` and plain stderr lines at start-up.
/// The journal is chosen only when the daemon's output would end up there
/// anyway, so someone running `tether` in a terminal still sees its log.
public enum JournalDetection {
    /// True when stderr is the journal stream systemd set up for us
    /// (systemd.exec(5) documents comparing JOURNAL_STREAM with fstat), or
    /// when journald's socket exists and we run as a systemd service
    /// (INVOCATION_ID or NOTIFY_SOCKET set), e.g. with `StandardError=null`.
    public static func shouldUseJournal(
        environment: [String: String], stderrIdentity: FileIdentity?, socketExists: Bool
    ) -> Bool {
        if let stream = environment["JOURNAL_STREAM"], let streamIdentity = FileIdentity(journalStream: stream),
           let stderrIdentity, streamIdentity == stderrIdentity {
            return true
        }
        let underSystemd = isSet(environment["INVOCATION_ID"]) || isSet(environment["NOTIFY_SOCKET"])
        return socketExists && underSystemd
    }

    /// The same decision for this process, as it is now (its environment, as
    /// the caller already read it or read here).
    public static func shouldUseJournal(
        environment: [String: String] = ProcessEnvironment.current(),
        socketPath: String = JournalLogHandler.defaultSocketPath
    ) -> Bool {
        shouldUseJournal(
            environment: environment,
            stderrIdentity: FileIdentity(descriptor: STDERR_FILENO),
            socketExists: isSocket(atPath: socketPath)
        )
    }

    private static func isSet(_ value: String?) -> Bool {
        value.map { !$0.isEmpty } ?? false
    }

    /// Only a socket counts: a stale regular file at the path (a
    /// container's leftover) must not send every entry to the fallback.
    static func isSocket(atPath path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFSOCK
    }
}
