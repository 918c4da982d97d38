#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension TetherConfig {
    /// A config file is a few kilobytes; refusing big files catches a wrong path
    /// (a log, a device node) before it is read into memory.
    static let maximumFileSize = 1 << 20

    /// Reads and parses the file at `path`. A missing or unreadable file is a
    /// `ConfigError` naming the path and the system's reason.
    public static func load(path: String, instance: InstanceName = .default) throws(ConfigError) -> TetherConfig {
        let bytes = try readFile(path)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(file: path, line: firstInvalidUTF8Line(bytes), message: "is not valid UTF-8")
        }
        return try parse(text, file: path, instance: instance)
    }

    private static func readFile(_ path: String) throws(ConfigError) -> [UInt8] {
        func failure(_ what: String, _ code: Int32) -> ConfigError {
            ConfigError(file: path, message: "\(what): \(String(cString: strerror(code)))")
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("cannot open", errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("cannot stat", errno) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw ConfigError(file: path, message: "is not a regular file") }

        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure("cannot read", errno)
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= maximumFileSize else {
                throw ConfigError(file: path, message: "is larger than \(ByteSizeText.format(Int64(maximumFileSize))); is this the right file?")
            }
        }
    }

    private static func firstInvalidUTF8Line(_ bytes: [UInt8]) -> Int? {
        for (index, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated()
        where String(validating: line, as: UTF8.self) == nil {
            return index + 1
        }
        return nil
    }
}
