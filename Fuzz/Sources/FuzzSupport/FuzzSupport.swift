import CLibFuzzer
#if canImport(Glibc)
import Glibc
#endif

/// Hands the process's arguments and `test` to libFuzzer and exits with its
/// status. Each harness's @main calls this: SwiftPM links executables with
/// main() aliased to the module's entry point, so libFuzzer's own main() is
/// not the one that runs.
public func runLibFuzzer(_ test: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> Never {
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, test))
}

/// Reads typed values off a fuzzer input. Past the end every read gives zeros
/// (and empty arrays), so any byte string is a valid input and generators that
/// read from it always terminate.
public struct FuzzInput {
    public let bytes: [UInt8]
    public private(set) var position = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var isAtEnd: Bool { position >= bytes.count }
    public var remaining: Int { max(0, bytes.count - position) }

    public mutating func byte() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    /// Up to `count` bytes: fewer at the end of the input.
    public mutating func bytes(_ count: Int) -> [UInt8] {
        let taken = Array(bytes[min(position, bytes.count)..<min(position + max(count, 0), bytes.count)])
        position += taken.count
        return taken
    }

    /// A little-endian integer.
    public mutating func integer<T: FixedWidthInteger>(_: T.Type = T.self) -> T {
        var value: T = 0
        for index in 0..<(T.bitWidth / 8) { value |= T(truncatingIfNeeded: byte()) << (8 * index) }
        return value
    }

    public mutating func rest() -> [UInt8] { bytes(remaining) }
}

/// The writing half of `FuzzInput`, for seed writers.
public struct FuzzOutput {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func byte(_ value: UInt8) { bytes.append(value) }
    public mutating func bytes(_ values: some Sequence<UInt8>) { bytes.append(contentsOf: values) }
    public mutating func integer<T: FixedWidthInteger>(_ value: T) {
        for index in 0..<(T.bitWidth / 8) { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
    }
}

/// A property of the code under test. When it does not hold, says which and
/// aborts: libFuzzer reports that as a crash and saves the input.
public func require(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
    file: StaticString = #fileID, line: UInt = #line
) {
    guard !condition() else { return }
    printError("PROPERTY VIOLATED at \(file):\(line): \(message())")
    abort()
}

/// Writes a line to standard error, unbuffered (the C `stderr` global is off
/// limits in strict concurrency, and the line must be out before an abort).
public func printError(_ text: String) { writeLine(text, to: 2) }

private func writeLine(_ text: String, to fd: Int32) {
    var line = Array((text + "\n").utf8)
    var offset = 0
    while offset < line.count {
        let written = line.withUnsafeMutableBytes { write(fd, $0.baseAddress?.advanced(by: offset), $0.count - offset) }
        guard written > 0 else { return }
        offset += written
    }
}

/// The fuzzer's input as an array (libFuzzer passes a null pointer for the empty input).
public func inputBytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// Seeds are Swift values in each harness (so they say what they are); with
/// FUZZ_WRITE_SEEDS=DIR set, a harness writes them to DIR and exits instead of
/// fuzzing.
public func writeSeedsIfAsked(_ seeds: () -> [(name: String, bytes: [UInt8])]) {
    guard let directory = getenv("FUZZ_WRITE_SEEDS").map({ String(cString: $0) }) else { return }
    for seed in seeds() {
        let path = directory + "/" + seed.name
        guard let file = fopen(path, "wb") else {
            printError("cannot write \(path)")
            exit(1)
        }
        let written = seed.bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) }
        fclose(file)
        guard written == seed.bytes.count else {
            printError("short write to \(path)")
            exit(1)
        }
        writeLine("wrote \(path) (\(seed.bytes.count) bytes)", to: 1)
    }
    // _exit: LeakSanitizer's check at exit has nothing to say about seed writing.
    _exit(0)
}
