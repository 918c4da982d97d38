#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `dongle.pairing` and `dongle.passkey_file`: read when the config is
/// loaded, so a missing, unreadable, shared or malformed passkey file is a
/// config error at `passkey_file`'s line, not a pairing that fails later.
///
/// The passkey is a secret (whoever has it can pair with the dongle): the
/// file must not grant anything to "others"; its owner or group is the
/// service's user.
extension TetherConfig {
    static func parsePairing(_ section: ConfigSection) throws(ConfigError) -> Pairing {
        let file = try section.string("passkey_file")
        let choices = "\"never\", \"just-works\" or \"passkey-file\""
        switch try section.string("pairing") {
        case nil, "never"?:
            if file != nil {
                throw section.error("passkey_file", "is used only with pairing = \"passkey-file\"")
            }
            return .never
        case "just-works"?:
            if file != nil {
                throw section.error("passkey_file", "is used only with pairing = \"passkey-file\" (pairing is \"just-works\")")
            }
            return .justWorks
        case "passkey-file"?:
            guard let file else {
                throw section.error("pairing", "\"passkey-file\" needs passkey_file, the path of a file holding the dongle's six-digit passkey")
            }
            guard file.hasPrefix("/") else {
                throw section.error("passkey_file", "must be an absolute path, got \(ConfigContext.quoted(file))")
            }
            switch PasskeyFile.load(file) {
            case .success(let passkey): return .passkey(passkey, file: file)
            case .failure(let problem): throw section.error("passkey_file", "\(file): \(problem.message)")
            }
        case let other?:
            throw section.error("pairing", "expected one of \(choices), got \(ConfigContext.quoted(other))")
        }
    }
}

/// Reads a passkey file: six decimal digits (leading zeros kept, 000000 to
/// 999999), optionally followed by a newline, in a regular file that others
/// cannot read.
public enum PasskeyFile {
    public struct Problem: Error, Sendable, Equatable {
        public var message: String
    }

    public static func load(_ path: String) -> Result<UInt32, Problem> {
        func failure(_ what: String, _ code: Int32) -> Result<UInt32, Problem> {
            .failure(Problem(message: "\(what): \(String(cString: strerror(code)))"))
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return failure("cannot open", errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return failure("cannot stat", errno) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return .failure(Problem(message: "is not a regular file")) }
        guard info.st_mode & 0o007 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            return .failure(Problem(message: "others may read it (mode \(mode)): the passkey is a secret; chmod o-rwx it (0600, owned by the service's user, or 0640 with its group)"))
        }
        var bytes = [UInt8](repeating: 0, count: 64)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress.map { $0 + count }, $0.count - count) }
            if got < 0 {
                if errno == EINTR { continue }
                return failure("cannot read", errno)
            }
            if got == 0 { break }
            count += got
        }
        return parse(Array(bytes[..<count]))
    }

    /// The passkey in a file's bytes: exactly six digits, then at most one
    /// line end.
    public static func parse(_ bytes: [UInt8]) -> Result<UInt32, Problem> {
        var digits = bytes[...]
        if digits.last == UInt8(ascii: "\n") { digits = digits.dropLast() }
        if digits.last == UInt8(ascii: "\r") { digits = digits.dropLast() }
        guard digits.count == 6, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return .failure(Problem(message: "expected the six-digit passkey (such as 123456, leading zeros kept) and nothing else"))
        }
        return .success(digits.reduce(UInt32(0)) { $0 * 10 + UInt32($1 - UInt8(ascii: "0")) })
    }
}
