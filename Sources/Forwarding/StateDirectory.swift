#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The forwarder's state directory (its cursor and status file), made ready
/// before anything is published: a cursor that cannot be stored would have
/// the forwarder publish one window of records and then stall, failing every
/// store. Under systemd `StateDirectory=` makes it; started by hand it may
/// not exist yet, and then it is created (mode 0700) when its parent exists
/// and is writable.
public enum StateDirectory {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Creates `path` if it is missing; fails, naming the path and why, if it
    /// cannot be created or is not a writable directory.
    public static func prepare(_ path: String) throws(Failure) {
        var info = stat()
        if stat(path, &info) != 0 {
            guard errno == ENOENT else { throw failure(path, "cannot be read") }
            guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw failure(path, "cannot be created") }
            guard stat(path, &info) == 0 else { throw failure(path, "cannot be read") }
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw Failure(description: "state directory \(path) is not a directory (--state-directory, or $STATE_DIRECTORY)")
        }
        guard access(path, W_OK | X_OK) == 0 else { throw failure(path, "is not writable") }
    }

    private static func failure(_ path: String, _ what: String) -> Failure {
        let reason = String(cString: strerror(errno))
        return Failure(description: "state directory \(path) \(what): \(reason) (--state-directory, or $STATE_DIRECTORY)")
    }
}
