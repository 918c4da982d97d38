#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `dongle.pairing` and `dongle.passkey_file`. Parsing the config never
/// opens the passkey file: every command loads the config (`tether
/// forward`, `tether readings`, `tether check-config`), and only `tether
/// run` needs the secret, so only it reads it (`loadPasskey`), and fails at
/// start with the config's exit status when it cannot.
///
/// `pairing = "passkey-file"` also needs `dongle.address`: with only
/// `name_prefix` or `service_uuid`, Tether would pair with, and type the
/// passkey into, whichever matching advertiser is strongest, which anyone
/// nearby can be.
extension TetherConfig {
    static func parsePairing(_ section: ConfigSection, address: String?) throws(ConfigError) -> Pairing {
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
            guard address != nil else {
                throw section.error(
                    "pairing",
                    "\"passkey-file\" needs dongle.address: with name_prefix or service_uuid alone Tether would pair with, and give the passkey to, the strongest matching advertiser, which anyone nearby can be"
                )
            }
            guard let file else { return .passkey(.credential) }
            guard file.hasPrefix("/") else {
                throw section.error("passkey_file", "must be an absolute path, got \(ConfigContext.quoted(file))")
            }
            return .passkey(.file(file))
        case let other?:
            throw section.error("pairing", "expected one of \(choices), got \(ConfigContext.quoted(other))")
        }
    }

    /// Where `passkey_file`'s problems are reported: its line, or
    /// `pairing`'s when the credential is used.
    private func passkeyError(_ message: String) -> ConfigError {
        let location = notes.passkeyLocation
        return ConfigError(file: location?.file ?? "config", line: location?.line, key: location?.key, message: message)
    }

    /// The passkey, for `tether run` alone: nil unless `pairing =
    /// "passkey-file"`. The file must be the service's: owned by `euid` (or
    /// root), mode 0600 or stricter, or systemd's credential (under
    /// `$CREDENTIALS_DIRECTORY`, which systemd keeps to the service).
    public func loadPasskey(euid: UInt32, environment: [String: String]) throws(ConfigError) -> Passkey? {
        guard case .passkey(let source) = dongle.pairing else { return nil }
        let credentials = PasskeyFile.credentialsDirectory(environment)
        let path: String
        switch source {
        case .file(let file):
            path = file
        case .credential:
            guard let credentials else {
                throw passkeyError(
                    "pairing = \"passkey-file\" without passkey_file reads systemd's credential \"\(PasskeyFile.credentialName)\", but CREDENTIALS_DIRECTORY is not set: add LoadCredential=\(PasskeyFile.credentialName):/etc/tether/passkey to the unit (systemctl edit tether), or set passkey_file"
                )
            }
            path = credentials + "/" + PasskeyFile.credentialName
        }
        switch PasskeyFile.load(path, euid: euid, credentialsDirectory: credentials) {
        case .success(let passkey): return passkey
        case .failure(let problem): throw passkeyError("\(path): \(problem.message)")
        }
    }

    /// What `tether check-config` says of the passkey, from the file's
    /// metadata only (the secret is never read): nil without a passkey, a
    /// description when the service can use it, a `ConfigError` saying how
    /// to fix it when it cannot.
    public func checkPasskeyFile(service: PasskeyFile.ServiceUser) throws(ConfigError) -> String? {
        guard case .passkey(let source) = dongle.pairing else { return nil }
        switch source {
        case .credential:
            return "systemd's credential \"\(PasskeyFile.credentialName)\" (LoadCredential=\(PasskeyFile.credentialName):FILE in the unit; tether run reads it)"
        case .file(let path) where PasskeyFile.isSystemdCredentialPath(path):
            return "\(path) (a systemd credential, under /run/credentials: tether run checks it)"
        case .file(let path):
            switch PasskeyFile.inspect(path, service: service) {
            case .success(let summary): return "\(path) (\(summary))"
            case .failure(let problem): throw passkeyError("\(path): \(problem.message)")
            }
        }
    }
}

/// The six-digit passkey: its description never shows the digits, so a
/// log line or a dump cannot leak it.
public struct Passkey: Sendable, Equatable, CustomStringConvertible {
    public let value: UInt32

    public init?(_ value: UInt32) {
        guard value <= 999_999 else { return nil }
        self.value = value
    }

    public var description: String { "<passkey>" }
}

/// Reads and checks a passkey file: six decimal digits (leading zeros kept,
/// 000000 to 999999), optionally followed by a newline, in a regular file
/// that is the service's alone.
public enum PasskeyFile {
    public struct Problem: Error, Sendable, Equatable {
        public var message: String
    }

    /// The systemd credential `tether run` reads when `passkey_file` is not
    /// set: `LoadCredential=passkey:/etc/tether/passkey` in the unit puts a
    /// copy at `$CREDENTIALS_DIRECTORY/passkey`, readable by the service alone.
    public static let credentialName = "passkey"

    /// The user `tether run` runs as, for `tether check-config`'s verdict.
    public struct ServiceUser: Sendable, Equatable {
        public var uid: UInt32
        public var name: String

        public init(uid: UInt32, name: String) {
            self.uid = uid
            self.name = name
        }

        /// Root runs `check-config` for the shipped unit, whose user is
        /// `tether`; anyone else checks for a `tether run` of their own.
        public static func current() -> ServiceUser {
            let euid = geteuid()
            if euid == 0, let entry = getpwnam("tether") {
                return ServiceUser(uid: entry.pointee.pw_uid, name: "tether")
            }
            return ServiceUser(uid: euid, name: userName(euid))
        }
    }

    static func userName(_ uid: UInt32) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }

    /// `$CREDENTIALS_DIRECTORY` when set, without a trailing slash.
    static func credentialsDirectory(_ environment: [String: String]) -> String? {
        guard var directory = environment["CREDENTIALS_DIRECTORY"], directory.hasPrefix("/") else { return nil }
        while directory.count > 1, directory.hasSuffix("/") { directory.removeLast() }
        return directory
    }

    /// Where systemd puts the credentials of every unit.
    static func isSystemdCredentialPath(_ path: String) -> Bool {
        path.hasPrefix("/run/credentials/")
    }

    static let fix =
        "the passkey is a secret: make it the service's alone (chown the service's user, chmod 0600), or give it through systemd's LoadCredential=\(credentialName):FILE and drop passkey_file"

    /// The ownership and mode rules, on a file's metadata.
    static func problem(_ info: stat, euid: UInt32) -> Problem? {
        guard (info.st_mode & S_IFMT) == S_IFREG else { return Problem(message: "is not a regular file (a symlink is not followed)") }
        let mode = "mode \(String(info.st_mode & 0o7777, radix: 8, uppercase: false).leftPadded(to: 4))"
        guard info.st_uid == euid || info.st_uid == 0 else {
            return Problem(message: "is owned by \(userName(info.st_uid)), not by the service's user (\(userName(euid))) or root; \(fix)")
        }
        guard info.st_mode & 0o077 == 0 else {
            return Problem(message: "its group or others may read it (\(mode)); \(fix)")
        }
        return nil
    }

    /// For `tether check-config`: whether `service` may use the file, from
    /// its metadata alone (lstat: the contents are never read).
    public static func inspect(_ path: String, service: ServiceUser) -> Result<String, Problem> {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            let code = errno
            return .failure(Problem(message: "cannot stat: \(String(cString: strerror(code))); \(fix)"))
        }
        if let problem = problem(info, euid: service.uid) { return .failure(problem) }
        let mode = String(info.st_mode & 0o7777, radix: 8).leftPadded(to: 4)
        let owner = userName(info.st_uid)
        if service.uid != 0, info.st_uid != service.uid {
            return .failure(Problem(message: "is owned by \(owner) (mode \(mode)), so the service's user (\(service.name)) cannot read it; \(fix)"))
        }
        guard info.st_mode & 0o400 != 0 || service.uid == 0 else {
            return .failure(Problem(message: "its owner may not read it (mode \(mode)); chmod 0600 it"))
        }
        return .success("owner \(owner), mode \(mode): usable by the service's user, \(service.name)")
    }

    /// For `tether run`: opens the file (no symlink followed), checks the
    /// opened file's owner and mode, then reads it. A file in
    /// `credentialsDirectory` is systemd's and taken as it is.
    public static func load(_ path: String, euid: UInt32, credentialsDirectory: String?) -> Result<Passkey, Problem> {
        func failure(_ what: String, _ code: Int32) -> Result<Passkey, Problem> {
            .failure(Problem(message: "\(what): \(String(cString: strerror(code))); \(fix)"))
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return failure("cannot open", errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return failure("cannot stat", errno) }
        let systemds = credentialsDirectory.map { path.hasPrefix($0 + "/") && !path.dropFirst($0.count + 1).contains("/") } ?? false
        if systemds {
            guard (info.st_mode & S_IFMT) == S_IFREG else { return .failure(Problem(message: "is not a regular file")) }
        } else if let problem = problem(info, euid: euid) {
            return .failure(problem)
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
    public static func parse(_ bytes: [UInt8]) -> Result<Passkey, Problem> {
        var digits = bytes[...]
        if digits.last == UInt8(ascii: "\n") { digits = digits.dropLast() }
        if digits.last == UInt8(ascii: "\r") { digits = digits.dropLast() }
        guard digits.count == 6, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              let passkey = Passkey(digits.reduce(UInt32(0)) { $0 * 10 + UInt32($1 - UInt8(ascii: "0")) })
        else {
            return .failure(Problem(message: "expected the six-digit passkey (such as 123456, leading zeros kept) and nothing else"))
        }
        return .success(passkey)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
