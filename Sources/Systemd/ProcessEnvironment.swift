#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The process's environment variables, read straight from `environ`.
///
/// This is where systemd hands a service its settings (NOTIFY_SOCKET,
/// WATCHDOG_USEC, JOURNAL_STREAM, STATE_DIRECTORY). FoundationEssentials'
/// `ProcessInfo.processInfo.environment` gives the same dictionary, but its
/// first use sets up `ProcessInfo` as a whole (its locks, the process's
/// identity): three 64 KiB windows of code the daemon faulted in at start for
/// nothing else (docs/development.md, "Footprint, step by step").
///
/// Read it before starting threads that might call setenv(3): like getenv(3),
/// it reads `environ` without a lock, and Tether itself never changes it.
public enum ProcessEnvironment {
    /// Every `NAME=value` entry. An entry without `=` is skipped; when a name
    /// repeats, the first entry wins, as getenv(3) finds it.
    public static func current() -> [String: String] {
        var variables: [String: String] = [:]
        // Optional on purpose: glibc's module declares `environ` non-optional, musl's may not.
        let first: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ
        guard var entry = first else { return variables }
        while let text = entry.pointee {
            let bytes = UnsafeBufferPointer(
                start: UnsafeRawPointer(text).assumingMemoryBound(to: UInt8.self), count: strlen(text))
            if let equals = bytes.firstIndex(of: UInt8(ascii: "=")) {
                let name = String(decoding: bytes[..<equals], as: UTF8.self)
                if variables[name] == nil {
                    variables[name] = String(decoding: bytes[(equals + 1)...], as: UTF8.self)
                }
            }
            entry += 1
        }
        return variables
    }
}
