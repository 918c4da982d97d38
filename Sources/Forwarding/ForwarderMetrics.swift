import CoreMetrics
import MetricsTextfile
import Readings
import Synchronization

/// `tether forward`'s metrics, read from the forwarder's status and the
/// log's newest seq each time the textfile is written (every
/// `metrics.interval`): the forwarder's hot path records nothing for them.
///
/// Threading: `refresh` is called by one task at a time (the exporter's,
/// then the stop's).
public final class ForwarderMetrics: Sendable {
    public let registry: MetricsRegistry
    private let forwarder: Forwarder
    private let readingsDirectory: String
    private let connected: Meter
    private let published: CoreMetrics.Counter
    private let acknowledged: CoreMetrics.Counter
    private let acknowledgedSeq: Meter
    private let backlog: Meter
    private let gapRecords: CoreMetrics.Counter
    private let undecodableRecords: CoreMetrics.Counter
    private let exported = Mutex<Forwarder.Status>(Forwarder.Status())

    public init(instanceName: String, forwarder: Forwarder, readingsDirectory: String) {
        self.forwarder = forwarder
        self.readingsDirectory = readingsDirectory
        let registry = MetricsRegistry(instanceName: instanceName)
        self.registry = registry
        connected = registry.gauge("tether_forward_broker_connected", help: "1 while the forwarder is connected to the MQTT broker, else 0.")
        published = registry.counter(
            "tether_forward_records_published_total", help: "Records sent to the broker (a record sent again after a broker loss counts again)."
        )
        acknowledged = registry.counter(
            "tether_forward_records_acknowledged_total", help: "Records the broker acknowledged (PUBACK at QoS 1; sent, at QoS 0)."
        )
        acknowledgedSeq = registry.gauge(
            "tether_forward_acknowledged_seq", help: "The last seq the broker acknowledged, every record before it too (the cursor)."
        )
        backlog = registry.gauge(
            "tether_forward_backlog_records", help: "Records on disk that the broker has not acknowledged yet."
        )
        gapRecords = registry.counter(
            "tether_forward_gap_records_total", help: "Records that retention deleted before they were delivered (forward-gap)."
        )
        undecodableRecords = registry.counter(
            "tether_forward_undecodable_records_total",
            help: "Readings whose payload does not fit the config's [decode] declaration: published with their hex alone."
        )
    }

    /// Reads the forwarder's status and the log's newest seq (when that
    /// cannot be read, the backlog is left as it was).
    public func refresh() {
        let status = forwarder.status
        let lastSeqOnDisk = try? ReadingLogTail.lastSeq(inDirectory: readingsDirectory)
        let before = exported.withLock { exported in
            defer { exported = status }
            return exported
        }
        connected.set(status.connected ? 1 : 0)
        acknowledgedSeq.set(Double(status.acknowledgedSeq))
        published.advance(to: status.published, from: before.published)
        acknowledged.advance(to: status.acknowledged, from: before.acknowledged)
        gapRecords.advance(to: status.gapRecords, from: before.gapRecords)
        undecodableRecords.advance(to: status.undecodableRecords, from: before.undecodableRecords)
        if let lastSeqOnDisk {
            backlog.set(Double(lastSeqOnDisk > status.acknowledgedSeq ? lastSeqOnDisk - status.acknowledgedSeq : 0))
        }
    }

    /// The forwarder stopped: not connected any more.
    public func stopped() {
        connected.set(0)
    }
}
