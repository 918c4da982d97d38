/// The rule a backend re-dates records by (docs/operations.md, "Dating
/// readings"), as `tether readings --redate` applies it.
///
/// Within one boot (`boot_id`), time since boot (`boot_ms`) never jumps, so
/// `ts - boot_ms` of a record taken while the clock was synchronised
/// (`clock_synced`) is the moment the boot began by the true clock. A record
/// of the same boot taken while the clock was not synchronised is dated by
/// adding its own `boot_ms` to that moment. The earliest synchronised record
/// of a boot is the one used: it is the nearest to the unsynchronised ones
/// (which come first in a boot), so the drift of the boot clock against true
/// time (its oscillator's, tens of ppm) adds the least.
///
/// Invariant: `bootStart` holds, per boot, the start derived from the first
/// synchronised record learned, and is never changed after.
public struct ReadingRedating: Sendable {
    private var bootStart: [String: Int64] = [:]

    public init() {}

    /// Takes the boot's start from `record` if it is the boot's first
    /// synchronised record.
    public mutating func learn(_ record: ReadingRecord) {
        guard record.clockSynchronised == true, let boot = record.bootID, bootStart[boot] == nil, let sinceBoot = record.bootMilliseconds,
              let ts = UTCTimestamp.milliseconds(record.ts)
        else { return }
        bootStart[boot] = ts - Int64(clamping: sinceBoot)
    }

    /// The true time of `record` in the records' form, when it was taken
    /// with the clock unsynchronised and its boot has a synchronised record;
    /// nil otherwise (a synchronised `ts` stands as it is; one without a
    /// synchronised record of its boot cannot be repaired).
    public func redated(_ record: ReadingRecord) -> String? {
        guard record.clockSynchronised == false, let boot = record.bootID, let sinceBoot = record.bootMilliseconds,
              let start = bootStart[boot]
        else { return nil }
        return UTCTimestamp.string(milliseconds: start + Int64(clamping: sinceBoot))
    }

    /// How many boots have a start.
    public var bootsDated: Int { bootStart.count }
}
