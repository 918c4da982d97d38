/// One `NAME=value` pair of a journal entry. The value is bytes because the
/// journal stores bytes: a value may hold newlines or any binary data.
public struct JournalField: Sendable, Hashable {
    public let name: JournalFieldName
    public let value: [UInt8]

    public init(name: JournalFieldName, value: [UInt8]) {
        self.name = name
        self.value = value
    }

    public init(name: JournalFieldName, value: String) {
        self.init(name: name, value: Array(value.utf8))
    }
}
