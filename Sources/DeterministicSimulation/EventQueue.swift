/// The simulation's agenda: events by virtual time, ties broken by the order
/// they were scheduled in (so two events at the same instant always run in
/// the same order). A binary heap.
struct EventQueue<Event> {
    private struct Entry {
        var at: Duration
        var order: UInt64
        var event: Event

        func precedes(_ other: Entry) -> Bool { at < other.at || (at == other.at && order < other.order) }
    }

    private var heap: [Entry] = []
    private var scheduled: UInt64 = 0

    var isEmpty: Bool { heap.isEmpty }

    mutating func schedule(_ event: Event, at time: Duration) {
        scheduled += 1
        heap.append(Entry(at: time, order: scheduled, event: event))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    mutating func popNext() -> (at: Duration, event: Event)? {
        guard let first = heap.first else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < heap.count, heap[left].precedes(heap[smallest]) { smallest = left }
                if right < heap.count, heap[right].precedes(heap[smallest]) { smallest = right }
                guard smallest != parent else { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return (first.at, first.event)
    }
}
