import Foundation

/// ISO-8601 date text in the shapes SwiftCouch writes and most JSON carries
/// (`2026-11-25T10:30:00Z`, `2026-11-25T10:30:00.250Z`, `…+01:00`), written and read by hand.
///
/// `ISO8601DateFormatter` costs about 0.9 ms to make and 15 µs (writing) or 160 µs (reading) to
/// use on Linux, per date; these functions cost well under a microsecond. They give exactly what
/// the formatter gives, byte for byte and to the last bit of the `Date` (ISO8601Tests compare
/// them over every shape), and answer nil for anything they do not handle, so the caller asks the
/// formatter: dates before 1600 (the formatter switches to the Julian calendar before 1582) or
/// from the year 10000, and text in any other shape (the formatter's leniencies included: a
/// 30 February, hour 24, an offset without its colon, surrounding spaces).
enum ISO8601 {
    /// 1600-01-01T00:00:00Z and 10000-01-01T00:00:00Z, in seconds since 1970.
    static let firstSecond: Int64 = -11_676_096_000
    static let endSecond: Int64 = 253_402_300_800

    /// `date` as the formatter writes it with `.withInternetDateTime` (UTC), adding
    /// `.withFractionalSeconds` (milliseconds; from half a millisecond up rounded up) when the date
    /// is not a whole second; nil outside 1600–9999.
    static func withText<R>(_ date: Date, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        let interval = date.timeIntervalSince1970
        guard interval.isFinite, interval > Double(firstSecond - 1), interval < Double(endSecond) else { return nil }
        let whole = interval.rounded(.down) == interval
        var seconds: Int64
        var milliseconds: Int64 = 0
        if whole {
            seconds = Int64(interval)
        } else {
            // Whole milliseconds as the formatter counts them (half a millisecond added, then the
            // floor), then split.
            let total = Int64((interval * 1000 + 0.5).rounded(.down))
            seconds = floorDivide(total, 1000)
            milliseconds = total - seconds * 1000
        }
        guard seconds >= firstSecond, seconds < endSecond else { return nil }
        let days = floorDivide(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civilDate(daysSince1970: days)
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { buffer in
            var position = 0
            func put(_ value: Int64, digits: Int) {
                var value = value
                for offset in stride(from: digits - 1, through: 0, by: -1) {
                    buffer[position + offset] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
                position += digits
            }
            func put(_ character: Unicode.Scalar) {
                buffer[position] = UInt8(ascii: character)
                position += 1
            }
            put(year, digits: 4)
            put("-")
            put(month, digits: 2)
            put("-")
            put(day, digits: 2)
            put("T")
            put(secondOfDay / 3600, digits: 2)
            put(":")
            put(secondOfDay / 60 % 60, digits: 2)
            put(":")
            put(secondOfDay % 60, digits: 2)
            if !whole {
                put(".")
                put(milliseconds, digits: 3)
            }
            put("Z")
            return body(UnsafeBufferPointer(rebasing: buffer[0..<position]))
        }
    }

    /// ``withText(_:_:)`` as a `String`.
    static func text(_ date: Date) -> String? {
        withText(date) { String(decoding: $0, as: UTF8.self) }
    }

    /// The date of `text` when it is `YYYY-MM-DDTHH:MM:SS`, then optionally `.` and 1 to 9 digits
    /// (read to the millisecond, the rest ignored, as the formatter does), then `Z` or `±HH:MM`,
    /// with every field in range and a year from 1600 to 9999; nil otherwise (the formatter may
    /// still read it).
    static func date(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { date(utf8: $0) }
    }

    static func date(utf8 text: UnsafeBufferPointer<UInt8>) -> Date? {
        let count = text.count
        guard count >= 20, count <= 35 else { return nil }
        func number(_ start: Int, _ digits: Int) -> Int64? {
            var value: Int64 = 0
            for index in start..<(start + digits) {
                let digit = text[index] &- UInt8(ascii: "0")
                guard digit < 10 else { return nil }
                value = value * 10 + Int64(digit)
            }
            return value
        }
        guard text[4] == UInt8(ascii: "-"), text[7] == UInt8(ascii: "-"), text[10] == UInt8(ascii: "T"),
            text[13] == UInt8(ascii: ":"), text[16] == UInt8(ascii: ":"),
            let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
            let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
            year >= 1600, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var position = 19
        var milliseconds: Int64 = 0
        if text[position] == UInt8(ascii: ".") {
            position += 1
            let start = position
            while position < count, text[position] &- UInt8(ascii: "0") < 10 { position += 1 }
            let digits = position - start
            guard (1...9).contains(digits) else { return nil }
            for index in 0..<3 {
                milliseconds *= 10
                if index < digits { milliseconds += Int64(text[start + index] &- UInt8(ascii: "0")) }
            }
        }
        var offset: Int64 = 0
        switch count - position {
        case 1:
            guard text[position] == UInt8(ascii: "Z") else { return nil }
        case 6:
            let sign = text[position]
            guard sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-"), text[position + 3] == UInt8(ascii: ":"),
                let hours = number(position + 1, 2), let minutes = number(position + 4, 2), hours < 24, minutes < 60
            else { return nil }
            offset = (hours * 3600 + minutes * 60) * (sign == UInt8(ascii: "+") ? 1 : -1)
        default:
            return nil
        }
        let days = daysSince1970(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
        return Date(timeIntervalSince1970: Double(seconds) + Double(milliseconds) / 1000)
    }

    // MARK: - The proleptic Gregorian calendar (Howard Hinnant's day algorithms)

    static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        value >= 0 ? value / divisor : (value - divisor + 1) / divisor
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Year, month and day of the day `days` after 1970-01-01.
    static func civilDate(daysSince1970 days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468  // days since 0000-03-01
        let era = floorDivide(shifted, 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }

    /// Days from 1970-01-01 to the given day.
    static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
        let yearFromMarch = month <= 2 ? year - 1 : year
        let era = floorDivide(yearFromMarch, 400)
        let yearOfEra = yearFromMarch - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
