import ChildProcess
import Foundation
import Glibc

/// Debian's `prometheus-node-exporter` with only its textfile collector, on
/// a free loopback port, reading `directory`. `scrape()` fetches /metrics as
/// Prometheus would; `stop()` ends it.
public final class NodeExporter: @unchecked Sendable {
    public static let executable = "/usr/bin/prometheus-node-exporter"
    public let port: Int
    private let process: ChildProcess

    public init(textfileDirectory: String, log: String) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else { throw Problem.notInstalled }
        port = try MosquittoBroker.freePort()
        process = try ChildProcess(
            executable: Self.executable,
            arguments: [
                "--collector.disable-defaults", "--collector.textfile",
                "--collector.textfile.directory=\(textfileDirectory)", "--web.listen-address=127.0.0.1:\(port)",
            ],
            stderrPath: log
        )
        for _ in 0..<300 {
            if (try? scrape()) != nil { return }
            usleep(10_000)
        }
        _ = process.terminate()
        throw Problem.didNotStart
    }

    /// GET /metrics, with curl.
    public func scrape() throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("scrape-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let curl = try ChildProcess(
            executable: "/usr/bin/curl", arguments: ["-sf", "-o", output, "http://127.0.0.1:\(port)/metrics"],
            stderrPath: "/dev/null"
        )
        guard ChildProcess.exitCode(curl.wait()) == 0 else { throw Problem.scrapeFailed }
        return try String(contentsOfFile: output, encoding: .utf8)
    }

    public func stop() { _ = process.terminate() }
    deinit { stop() }

    public enum Problem: Error, CustomStringConvertible {
        case notInstalled, didNotStart, scrapeFailed
        public var description: String {
            switch self {
            case .notInstalled: "prometheus-node-exporter is not installed (`make deps` installs it)"
            case .didNotStart: "node_exporter did not serve /metrics within 3 s"
            case .scrapeFailed: "GET /metrics failed"
            }
        }
    }
}

/// Samples of the Prometheus text format, looked up by name and labels.
public struct PrometheusSamples: Sendable {
    public struct Sample: Sendable {
        public var name: String
        public var labels: [String: String]
        public var value: Double
    }

    public let samples: [Sample]

    public init(_ text: String) {
        samples = text.split(separator: "\n").compactMap { line -> Sample? in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " ") else { return nil }
            let series = line[..<space]
            guard let value = Double(line[line.index(after: space)...]) else { return nil }
            var labels: [String: String] = [:]
            var name = String(series)
            if let open = series.firstIndex(of: "{"), series.hasSuffix("}") {
                name = String(series[..<open])
                let body = series[series.index(after: open)..<series.index(before: series.endIndex)]
                // Tether's label values hold no commas or quotes.
                for pair in body.split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2 else { continue }
                    labels[String(parts[0])] = String(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
                }
            }
            return Sample(name: name, labels: labels, value: value)
        }
    }

    /// The value of the one series named `name` whose labels include `labels`.
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = samples.filter { sample in
            sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value }
        }
        return matching.count == 1 ? matching[0].value : nil
    }

    /// The sum over every series named `name` whose labels include `labels`.
    public func sum(_ name: String, _ labels: [String: String] = [:]) -> Double {
        samples.filter { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }
            .reduce(0) { $0 + $1.value }
    }

    public func has(_ name: String) -> Bool { samples.contains { $0.name == name } }
}

/// Debian's `promtool` (package `prometheus`).
public enum Promtool {
    public static let path = "/usr/bin/promtool"
    public static var installed: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// Runs `promtool ARGUMENTS` (reading `stdin`, a file, when given) and
    /// returns its exit status and what it printed.
    public static func run(_ arguments: [String], stdin: String? = nil) throws -> (status: Int32?, output: String) {
        guard installed else { throw NodeExporter.Problem.notInstalled }
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("promtool-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        // A shell for the redirections: ChildProcess gives stdin /dev/null.
        let process = try ChildProcess(
            executable: "/bin/sh",
            arguments: ["-c", "exec \"$0\" \"$@\" < \"$STDIN\" > \"$OUTPUT\" 2>&1", path] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(["STDIN": stdin ?? "/dev/null", "OUTPUT": output]) { $1 }
        )
        let status = ChildProcess.exitCode(process.wait(timeout: .seconds(60)))
        return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    /// `promtool check metrics` on a file: nil when it passes, else what it printed.
    public static func metricsProblems(file: String) throws -> String? {
        let result = try run(["check", "metrics"], stdin: file)
        return result.status == 0 ? nil : "exit \(result.status.map(String.init) ?? "?"): \(result.output)"
    }
}
