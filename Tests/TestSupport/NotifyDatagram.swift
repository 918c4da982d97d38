/// An sd_notify message read back as its `KEY=VALUE` lines, in order.
public struct NotifyDatagram {
    public var assignments: [(key: String, value: String)]

    public init(_ payload: [UInt8]) {
        let text = String(decoding: payload, as: UTF8.self)
        assignments = text.split(separator: "\n", omittingEmptySubsequences: true).map { line in
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }
    }

    public var keys: [String] { assignments.map(\.key) }

    public subscript(key: String) -> String? {
        assignments.first { $0.key == key }?.value
    }
}
