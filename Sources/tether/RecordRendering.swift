import PayloadLayout
import Readings

/// How `tether readings` prints a record: as stored, or with the `fields`
/// the config's `[decode]` declares beside its `hex`. Counts the readings
/// whose payload does not fit, to say so once at the end.
final class RecordRendering {
    let layout: PayloadLayout?
    private(set) var undecodable = 0
    private var undecodableLengths: Set<Int> = []

    init(layout: PayloadLayout?) {
        self.layout = layout
    }

    /// One line (without its newline), rendered.
    func render(_ line: UnsafeRawBufferPointer) -> [UInt8] {
        guard let layout else { return Array(line) }
        switch RecordFields.annotate(line, with: layout) {
        case .decoded(let annotated):
            return annotated
        case .undecodable(let length):
            undecodable += 1
            if undecodableLengths.count < 8 { undecodableLengths.insert(length) }
            return Array(line)
        case .notDescribed:
            return Array(line)
        }
    }

    /// A batch of whole lines, rendered and written.
    func emit(_ batch: UnsafeRawBufferPointer, to output: StandardOutput) throws {
        guard layout != nil else { return try output.emit(batch) }
        var out: [UInt8] = []
        out.reserveCapacity(batch.count + batch.count / 2)
        ReadingsCommand.lines(of: batch) { line in
            out += render(line)
            out.append(UInt8(ascii: "\n"))
        }
        try out.withUnsafeBytes { try output.emit($0) }
    }

    /// On standard error: how many payloads did not fit, if any.
    func reportUndecodable() {
        guard let layout, undecodable > 0 else { return }
        let lengths = undecodableLengths.sorted().map(String.init).joined(separator: ", ")
        StandardError.emit("tether: \(undecodable) reading\(undecodable == 1 ? "" : "s") did not fit [decode] (\(layout.size) bytes declared; payloads of \(lengths) bytes): printed with hex alone\n")
    }
}
