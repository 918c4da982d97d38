/// FIFO of readings waiting to be written. Dropping the oldest must be cheap even
/// with 100 000 queued (it happens once per arriving reading while the disk is
/// failing), so instead of `Array.removeFirst` we advance a head index and compact
/// only occasionally.
struct ReadingBacklog {
    private var storage: [Reading] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ reading: Reading) {
        storage.append(reading)
    }

    mutating func removeOldest() -> Reading? {
        guard head < storage.count else { return nil }
        let reading = storage[head]
        head += 1
        // Compacting once the dead prefix is half the storage keeps this amortised O(1).
        if head >= 1024, head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return reading
    }

    /// Empties the backlog, returning its readings oldest first.
    mutating func removeAll() -> [Reading] {
        let readings = Array(storage[head...])
        storage = []
        head = 0
        return readings
    }

    /// Removes and returns up to `limit` of the oldest readings.
    mutating func removeOldest(upTo limit: Int) -> [Reading] {
        guard count > limit else { return removeAll() }
        let readings = Array(storage[head..<(head + limit)])
        head += limit
        if head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return readings
    }

    /// Puts readings that could not be written back in front of newer arrivals.
    /// In the room `removeOldest` left in front when there is (a failed
    /// write puts back what it took), so a retry costs its batch, not the backlog.
    mutating func prepend(_ readings: [Reading]) {
        guard !readings.isEmpty else { return }
        if head >= readings.count {
            head -= readings.count
            storage.replaceSubrange(head..<(head + readings.count), with: readings)
        } else {
            storage = readings + storage[head...]
            head = 0
        }
    }
}
