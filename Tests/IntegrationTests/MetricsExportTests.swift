import ChildProcess
import Foundation
import Readings
import TestSupport
import Testing

/// The metrics as an operator's Prometheus sees them: `tether run` and
/// `tether forward` as processes write their textfiles, Debian's real
/// node_exporter serves them, the test scrapes it and checks the values
/// against what happened on the simulator and the broker; promtool lints
/// the files.
@Suite(.serialized) struct MetricsExportTests {
    @Test func theDaemonsMetricsTellWhatHappenedOnTheSimulator() async throws {
        let harness = try await DaemonHarness()
        let textfiles = harness.directory.path + "/textfiles"
        try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
        let config = try DaemonProcessTests.writeConfig(harness)
        let file = textfiles + "/tether.prom"
        try appendMetricsTable(to: config, lines: [#"textfile = "\#(file)""#, #"interval = "1s""#])
        var daemon: ChildProcess? = try DaemonProcessTests().startDaemon(harness, config: config)
        let exporter = try NodeExporter(textfileDirectory: textfiles, log: harness.directory.path + "/node_exporter.log")
        defer {
            exporter.stop()
            _ = daemon?.terminate()
        }
        await harness.simulator.setNotifyRate(50)
        #expect(await eventually { await harness.simulator.state == .connected })
        // Two drops, each ridden out.
        for drop in 1...2 {
            try await Task.sleep(for: .milliseconds(1500))
            await harness.simulator.dropLink(reason: "test drop \(drop)")
            #expect(await eventually { harness.events().filter { $0.ev == "connected" }.count == drop + 1 })
        }
        try await Task.sleep(for: .milliseconds(1500))  // at least one poll and one write after the second
        var samples = PrometheusSamples("")
        let scraped = await eventually(timeout: .seconds(5), every: .milliseconds(250)) {
            samples = PrometheusSamples((try? exporter.scrape()) ?? "")
            return samples.value("tether_reconnects_total") == 2 && samples.value("tether_connected") == 1
        }
        let daemonLog = (try? String(contentsOfFile: harness.directory.path + "/daemon.log", encoding: .utf8)) ?? ""
        #expect(scraped, "scraped: \(samples.samples.filter { $0.name.hasPrefix("tether_") })\nlog: \(daemonLog.suffix(3000))")
        #expect(samples.value("tether_reconnects_total", ["instance_name": "default"]) == 2)
        #expect(samples.value("tether_state", ["state": "online"]) == 1)
        #expect(samples.sum("tether_state") == 1)
        #expect(samples.value("tether_connect_attempts_total", ["result": "success"]) == 3, "the first connect and one per drop")
        #expect(samples.value("tether_connect_to_online_seconds_count") == 3)
        #expect((samples.value("tether_keepalive_polls_total", ["result": "ok"]) ?? 0) >= 1)
        #expect((samples.value("tether_keepalive_poll_duration_seconds_count") ?? 0) >= 1)
        #expect((samples.value("tether_readings_total") ?? 0) > 50)
        let now = Date().timeIntervalSince1970
        #expect(samples.value("tether_last_reading_timestamp_seconds").map { now - $0 < 5 } == true)
        #expect(samples.value("tether_connected_since_timestamp_seconds").map { now - $0 < 10 } == true)
        #expect(samples.has("node_textfile_mtime_seconds"), "node_exporter read the file")
        #expect(samples.value("node_textfile_scrape_error") == 0)
        #expect(try Promtool.metricsProblems(file: file) == nil)

        // The file a stopped daemon leaves: every reading on disk counted, nothing online.
        let status = daemon?.terminate()
        daemon = nil
        #expect(status.flatMap(ChildProcess.exitCode) == 0)
        let final = PrometheusSamples(try String(contentsOfFile: file, encoding: .utf8))
        let onDisk = try harness.records().filter { $0.source != "gap" }.count
        #expect(final.value("tether_readings_total") == Double(onDisk), "\(onDisk) readings on disk")
        #expect(final.value("tether_connected") == 0 && final.sum("tether_state") == 0)
        let size = try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int ?? 0
        print("figure: the daemon's metrics textfile: \(size) bytes, \(final.samples.count) samples, readings_total \(onDisk)")
        await harness.stop()
    }

    @Test func theForwardersMetricsTellWhatTheBrokerAcknowledged() async throws {
        let setup = try ForwardCommandTests.Setup(records: 500)
        defer { setup.directory.remove() }
        let textfiles = setup.directory.path + "/textfiles"
        try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
        let broker = try MosquittoBroker(directory: setup.directory.url.appendingPathComponent("broker"))
        defer { broker.stop() }
        try setup.writeConfig(mqtt: [#"url = "mqtt://127.0.0.1:\#(broker.port)""#, "batch = 10"])
        let file = textfiles + "/tether-forward.prom"
        try appendMetricsTable(to: setup.config, lines: [#"forward_textfile = "\#(file)""#, #"interval = "1s""#])
        let process = try setup.forward()
        let exporter = try NodeExporter(textfileDirectory: textfiles, log: setup.directory.path + "/node_exporter.log")
        defer {
            exporter.stop()
            _ = process.terminate()
        }
        var samples = PrometheusSamples("")
        let caughtUp = await eventually(timeout: .seconds(10), every: .milliseconds(250)) {
            samples = PrometheusSamples((try? exporter.scrape()) ?? "")
            return samples.value("tether_forward_records_acknowledged_total") == 500
        }
        #expect(caughtUp, "\(samples.samples.filter { $0.name.hasPrefix("tether_") })\n\(setup.log())")
        #expect(samples.value("tether_forward_broker_connected", ["instance_name": "default"]) == 1)
        #expect(samples.value("tether_forward_acknowledged_seq") == 500)
        #expect(samples.value("tether_forward_backlog_records") == 0)
        #expect(samples.value("tether_forward_records_published_total") == 500)
        #expect(samples.value("tether_forward_gap_records_total") == 0)

        // The broker goes away while the log grows: the backlog shows it.
        broker.stop()
        try setup.append(501...560)
        let behind = await eventually(timeout: .seconds(10), every: .milliseconds(250)) {
            samples = PrometheusSamples((try? exporter.scrape()) ?? "")
            return samples.value("tether_forward_backlog_records") == 60 && samples.value("tether_forward_broker_connected") == 0
        }
        #expect(behind, "\(samples.samples.filter { $0.name.hasPrefix("tether_") })")
        #expect(try Promtool.metricsProblems(file: file) == nil)
        #expect(ChildProcess.exitCode(process.terminate()) == 0)
        let final = PrometheusSamples(try String(contentsOfFile: file, encoding: .utf8))
        #expect(final.value("tether_forward_broker_connected") == 0)
    }

    /// A `[metrics]` table, appended to a config a test wrote.
    func appendMetricsTable(to config: String, lines: [String]) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: config))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(("\n[metrics]\n" + lines.joined(separator: "\n") + "\n").utf8))
    }
}
