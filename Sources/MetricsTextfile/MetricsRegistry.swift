import CoreMetrics
import Prometheus

/// One process's metrics: swift-metrics instruments (what the code records
/// into) backed by a swift-prometheus registry (what the textfile is made
/// from), every series carrying the same `instance_name` label.
///
/// Why not `MetricsSystem.bootstrap`: the daemon runs in tests many times in
/// one process, each run with its own registry, and every family needs a
/// `# HELP` line (promtool's lint asks for it), which the factory's
/// `Counter(label:)` path cannot give. So each instrument is made here from a
/// registry collector created with its help text, wrapped in swift-metrics'
/// own type.
///
/// Thread safety: the registry and its collectors are locked or atomic; the
/// instruments may be recorded into from any thread.
public struct MetricsRegistry: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    private let common: [(String, String)]

    /// - Parameter instanceName: the `instance_name` label: `default`, or
    ///   NAME for `tether@NAME`.
    public init(instanceName: String) {
        registry = PrometheusCollectorRegistry()
        factory = PrometheusMetricsFactory(registry: registry)
        common = [("instance_name", instanceName)]
    }

    /// A counter: `name` ends in `_total`.
    public func counter(_ name: String, help: String, labels: [(String, String)] = []) -> CoreMetrics.Counter {
        let labels = common + labels
        let handler = registry.makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
        return CoreMetrics.Counter(label: name, dimensions: labels, handler: handler, factory: factory)
    }

    /// A gauge that is set (and may go up and down).
    public func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> CoreMetrics.Meter {
        let labels = common + labels
        let handler = registry.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
        return CoreMetrics.Meter(label: name, dimensions: labels, handler: handler, factory: factory)
    }

    /// A histogram of durations, exported in seconds: `name` ends in `_seconds`.
    public func durationHistogram(
        _ name: String, help: String, buckets: [Duration], labels: [(String, String)] = []
    ) -> CoreMetrics.Timer {
        let labels = common + labels
        let handler = registry.makeDurationHistogram(descriptor: Self.descriptor(name, help), labels: labels, buckets: buckets)
        return CoreMetrics.Timer(label: name, dimensions: labels, handler: handler, factory: factory)
    }

    /// The text format of everything registered.
    public func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(8192)
        registry.emit(into: &buffer)
        return buffer
    }

    private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}
