#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Systemd

/// The CLI's messages to stderr, without Foundation's `FileHandle` (the
/// full Foundation links ICU, 37 MB, into the binary).
enum StandardError {
    static func emit(_ text: String) {
        LogOutput.write(Array(text.utf8), to: STDERR_FILENO)
    }
}
