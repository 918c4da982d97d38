import CoreMetrics
import MetricsTextfile
import Readings
import Synchronization

/// `tether forward`'s metrics, read from the forwarder's status and the
/// log's newest seq each time the textfile is written (every
/// `metrics.interval`): the forwarder's hot path records nothing for them.
///
/// Threading: `refresh` is called by one task at a time (the exporter's).
public final class ForwarderMetrics: Sendable {
    public let registry: MetricsRegistry
    private let connected: Meter
    private let published: CoreMetrics.Counter
    private let acknowledged: CoreMetrics.Counter
    private let acknowledgedSeq: Meter
    private let backlog: Meter
    private let gapRecords: CoreMetrics.Counter
    private let exported = Mutex<Forwarder.Status>(Forwarder.Status())

    public init(instanceName: String) {
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
    }

    /// - Parameter lastSeqOnDisk: the newest seq in the readings log (nil:
    ///   none, or it could not be read: the backlog is then left as it was).
    public func refresh(status: Forwarder.Status, lastSeqOnDisk: UInt64?) {
        let before = exported.withLock { exported in
            defer { exported = status }
            return exported
        }
        connected.set(status.connected ? 1 : 0)
        acknowledgedSeq.set(Double(status.acknowledgedSeq))
        Self.add(status.published, since: before.published, to: published)
        Self.add(status.acknowledged, since: before.acknowledged, to: acknowledged)
        Self.add(status.gapRecords, since: before.gapRecords, to: gapRecords)
        if let lastSeqOnDisk {
            backlog.set(Double(lastSeqOnDisk > status.acknowledgedSeq ? lastSeqOnDisk - status.acknowledgedSeq : 0))
        }
    }

    /// The forwarder stopped: not connected any more.
    public func stopped() {
        connected.set(0)
    }

    private static func add(_ now: UInt64, since before: UInt64, to counter: CoreMetrics.Counter) {
        guard now > before, now - before < UInt64(Int64.max) else { return }
        counter.increment(by: Int64(now - before))
    }
}
