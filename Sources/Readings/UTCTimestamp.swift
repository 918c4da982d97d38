import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Formats dates as "2026-11-21T13:45:12.345Z" without DateFormatter (slow, and
/// locale/calendar state we do not want on the logging hot path).
enum UTCTimestamp {
    /// 9999-12-31T23:59:59.999Z: the last instant a four-digit year can show.
    private static let maximumMilliseconds: Int64 = 253_402_300_799_999

    static func append(_ date: Date, to buffer: inout [UInt8]) {
        // Clamp rather than trap: a nonsense clock must not take the daemon down.
        let scaled = (date.timeIntervalSince1970 * 1000).rounded(.down)
        let milliseconds: Int64
        if !(scaled > 0) {
            milliseconds = 0  // also NaN
        } else if scaled >= Double(maximumMilliseconds) {
            milliseconds = maximumMilliseconds
        } else {
            milliseconds = Int64(scaled)
        }
        let days = milliseconds / 86_400_000
        let millisecondOfDay = milliseconds % 86_400_000
        let (year, month, day) = civilDate(daysSince1970: days)
        appendPadded(year, width: 4, to: &buffer)
        buffer.append(UInt8(ascii: "-"))
        appendPadded(month, width: 2, to: &buffer)
        buffer.append(UInt8(ascii: "-"))
        appendPadded(day, width: 2, to: &buffer)
        buffer.append(UInt8(ascii: "T"))
        appendPadded(millisecondOfDay / 3_600_000, width: 2, to: &buffer)
        buffer.append(UInt8(ascii: ":"))
        appendPadded(millisecondOfDay / 60_000 % 60, width: 2, to: &buffer)
        buffer.append(UInt8(ascii: ":"))
        appendPadded(millisecondOfDay / 1000 % 60, width: 2, to: &buffer)
        buffer.append(UInt8(ascii: "."))
        appendPadded(millisecondOfDay % 1000, width: 3, to: &buffer)
        buffer.append(UInt8(ascii: "Z"))
    }

    static func string(_ date: Date) -> String {
        var buffer: [UInt8] = []
        append(date, to: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    /// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian), for days ≥ 0.
    private static func civilDate(daysSince1970 days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }

    private static func appendPadded(_ value: Int64, width: Int, to buffer: inout [UInt8]) {
        let digits = String(value).utf8
        if digits.count < width {
            buffer.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width - digits.count))
        }
        buffer.append(contentsOf: digits)
    }
}
