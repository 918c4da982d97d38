import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension ReadingLog {
    /// Every record in `directory`, oldest file first, in file order (for tests and
    /// `tether readings`). Lines that are not well-formed records (a torn tail the
    /// daemon has not recovered yet, stray edits) are skipped rather than fatal.
    public static func readRecords(directory: String) throws -> [ReadingRecord] {
        let decoder = JSONDecoder()
        var records: [ReadingRecord] = []
        for file in try LogFileSystem.listLogFiles(in: directory) {
            let bytes = try LogFileSystem.readAll(file.path)
            for line in bytes.split(separator: UInt8(ascii: "\n")) {
                if let record = ReadingRecord.decode(line: line, using: decoder) {
                    records.append(record)
                }
            }
        }
        return records
    }
}
