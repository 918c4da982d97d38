import Foundation
import TestSupport
import Testing

/// The source tree, the built binary, and a way to run commands, for the
/// packaging tests (units, udev rules, sysusers, `make install`).
enum Packaging {
    /// The package root: this file is <root>/Tests/PackagingTests/Support.swift.
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func path(_ relative: String) -> String { root.appendingPathComponent(relative).path }

    /// The `tether` executable built next to this test bundle (.build/debug/tether
    /// for `swift build`), or nil if there is none.
    static var tetherBinary: String? {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("tether").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        let fallback = path(".build/debug/tether")
        return FileManager.default.isExecutableFile(atPath: fallback) ? fallback : nil
    }

    static func requireBinary() throws -> String {
        try #require(tetherBinary, "no tether binary next to the test bundle or in .build/debug: run `swift build` first")
    }

    /// The full path of `name` on PATH, if it is there.
    static func which(_ name: String) -> String? {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        for directory in directories + ["/usr/sbin", "/sbin"] {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static var hasMake: Bool { which("make") != nil }
    static var hasSystemdAnalyze: Bool { which("systemd-analyze") != nil }
    static var canInstall: Bool { hasMake && which("install") != nil && which("swift") != nil }

    struct Result: CustomStringConvertible {
        var status: Int32
        var output: String
        var description: String { "exit \(status):\n\(output)" }
    }

    /// Runs `executable` (a path, or a name looked up on PATH) and returns its
    /// exit status and its stdout and stderr together. Kills it after `timeout`.
    @discardableResult
    static func run(
        _ executable: String, _ arguments: [String], in directory: URL? = nil,
        environment extra: [String: String] = [:], stdin: String? = nil,
        timeout: Duration = .seconds(240)
    ) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : (which(executable) ?? executable))
        process.arguments = arguments
        process.currentDirectoryURL = directory ?? root
        var environment = ProcessInfo.processInfo.environment
        // Under `make test`, the outer make's flags (jobserver, command-line
        // variables) must not leak into the make these tests run.
        for name in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"] { environment[name] = nil }
        for (key, value) in extra { environment[key] = value }
        process.environment = environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        if let stdin {
            process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: stdin))
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        try process.run()
        let collected = OutputCollector()
        let reader = Thread {
            collected.set(pipe.fileHandleForReading.readDataToEndOfFile())
        }
        reader.start()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning {
            process.terminate()
            Issue.record("\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout)")
        }
        process.waitUntilExit()
        let output = collected.wait()
        return Result(status: process.terminationStatus, output: String(decoding: output, as: UTF8.self))
    }

    /// `make TARGET VAR=value…` in the package root.
    @discardableResult
    static func make(_ arguments: [String]) throws -> Result {
        try run("make", ["--no-print-directory"] + arguments)
    }

    /// `make install` into `destdir` with PREFIX=/usr and the debug binary, so
    /// that nothing is built in release mode.
    @discardableResult
    static func install(into destdir: TemporaryDirectory, binary: String) throws -> Result {
        try make([
            "install", "DESTDIR=\(destdir.path)/root", "PREFIX=/usr", "TETHER_BIN=\(binary)",
            "GEN_DIR=\(destdir.path)/gen",
        ])
    }

    static func read(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }
}

/// Holds a reader thread's result until it is done.
private final class OutputCollector: @unchecked Sendable {
    private let condition = NSCondition()
    private var data: Data?

    func set(_ value: Data) {
        condition.lock()
        data = value
        condition.broadcast()
        condition.unlock()
    }

    func wait() -> Data {
        condition.lock()
        defer { condition.unlock() }
        while data == nil { condition.wait() }
        return data!
    }
}

/// A unit file's directives, in order, comments and blank lines dropped.
struct UnitFile {
    struct Directive: Equatable {
        var section: String
        var key: String
        var value: String
    }

    var directives: [Directive] = []

    init(path: String) throws {
        var section = ""
        for raw in try Packaging.read(path).split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
                continue
            }
            guard let equals = line.firstIndex(of: "=") else {
                Issue.record("\(path): not a key=value line: \(line)")
                continue
            }
            directives.append(Directive(
                section: section,
                key: line[..<equals].trimmingCharacters(in: .whitespaces),
                value: line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)))
        }
    }

    /// Every value of `key` in `section`, in order.
    func values(_ key: String, in section: String = "Service") -> [String] {
        directives.filter { $0.section == section && $0.key == key }.map(\.value)
    }

    func value(_ key: String, in section: String = "Service") -> String? { values(key, in: section).last }
}
