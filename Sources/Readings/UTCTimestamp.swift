import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Formats dates as "2026-11-21T13:45:12.345Z" without DateFormatter (slow, and
/// locale/calendar state we do not want on the logging hot path).
public enum UTCTimestamp {
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

    public static func string(_ date: Date) -> String {
        var buffer: [UInt8] = []
        append(date, to: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    /// "2026-11-21T13:45:12.345Z" as milliseconds since 1970; nil for any
    /// other shape (the records' `ts` has exactly this one).
    public static func milliseconds(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "."), bytes[23] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
              let minute = number(14..<16), let second = number(17..<19), let millisecond = number(20..<23),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        let days = daysSince1970(year: year, month: month, day: day)
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millisecond
    }

    /// `milliseconds` since 1970 in the records' form.
    public static func string(milliseconds: Int64) -> String {
        string(Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    /// Howard Hinnant's days-from-civil algorithm, the inverse of `civilDate`.
    private static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
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
