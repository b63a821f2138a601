import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// The hand-written ISO-8601 text must be exactly what `ISO8601DateFormatter` gives, both ways,
/// so a date written or read by SwiftCouch is the same with or without the fast path.
@Suite("ISO-8601 dates written and read by hand, exactly as ISO8601DateFormatter", .cpuBound)
struct ISO8601Tests {
    // One pair per test (Swift Testing makes the suite anew for each): formatters are not Sendable.
    private let fractional: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()
    private let whole: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter
    }()

    /// What the formatter writes for `date`, with milliseconds only when it is not a whole second.
    private func formatterText(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        return (interval.rounded(.down) == interval ? whole : fractional).string(from: date)
    }

    /// What the formatter reads from `text`, with or without fractions.
    private func formatterDate(_ text: String) -> Date? {
        fractional.date(from: text) ?? whole.date(from: text)
    }

    /// Dates from 1600 to 9999: whole seconds, any fraction, milliseconds exactly, and fractions
    /// a hair either side of a rounding boundary (…0.9995, …x.xxx5).
    private static func sampleDates(count: Int, seed: UInt64) -> [Date] {
        var generator = SeededGenerator(seed: seed)
        let first = Double(ISO8601.firstSecond)
        let end = Double(ISO8601.endSecond) - 1
        var dates: [Date] = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -0.5), Date(timeIntervalSince1970: 0.0005),
            Date(timeIntervalSince1970: first), Date(timeIntervalSince1970: end),
            Date(timeIntervalSince1970: end + 0.25),
            Date(timeIntervalSince1970: 951_782_400),  // 2000-02-29
            Date(timeIntervalSince1970: 4_107_542_399.9996),  // rounds up into 2100-03-01
            Date(timeIntervalSince1970: Double(ISO8601.firstSecond) - 0.0004),  // rounds up into 1600
            Date.distantFuture,
        ]
        for index in 0..<count {
            let second = Double(Int64.random(in: Int64(first)...Int64(end), using: &generator))
            switch index % 4 {
            case 0: dates.append(Date(timeIntervalSince1970: second))
            case 1: dates.append(Date(timeIntervalSince1970: second + Double.random(in: 0..<1, using: &generator)))
            case 2:
                dates.append(
                    Date(timeIntervalSince1970: second + Double(Int.random(in: 0..<1000, using: &generator)) / 1000))
            default:
                let boundary = Double(Int.random(in: 0..<1000, using: &generator)) / 1000 + 0.0005
                dates.append(
                    Date(timeIntervalSince1970: second + boundary + Double.random(in: -1e-6...1e-6, using: &generator)))
            }
        }
        return dates
    }

    @Test("Writing: the same text as the formatter for 20,000 dates from 1600 to 9999")
    func writesLikeTheFormatter() {
        for date in Self.sampleDates(count: 20_000, seed: 11) {
            let text = ISO8601.text(date)
            #expect(text != nil, "the fast path refused \(date.timeIntervalSince1970)")
            #expect(text == formatterText(date), "for \(date.timeIntervalSince1970)")
        }
    }

    @Test("Writing outside 1600-9999 is left to the formatter, and DateCoding still writes its text")
    func writesOutsideTheRangeWithTheFormatter() {
        let dates = [
            Date(timeIntervalSince1970: Double(ISO8601.firstSecond) - 1),
            Date(timeIntervalSince1970: Double(ISO8601.firstSecond) - 0.0006),  // a millisecond before 1600
            Date(timeIntervalSince1970: -62_135_596_800),  // year 1, Julian in the formatter
            Date(timeIntervalSince1970: Double(ISO8601.endSecond)),
            Date(timeIntervalSince1970: Double(ISO8601.endSecond) - 0.0001),  // rounds into the year 10000
            Date.distantPast,
        ]
        for date in dates {
            #expect(ISO8601.text(date) == nil, "for \(date.timeIntervalSince1970)")
            #expect(DateCoding.iso8601Text(date) == formatterText(date))
        }
    }

    @Test("Reading: the formatter's own text gives the same Date, to the last bit")
    func readsTheFormattersText() {
        for date in Self.sampleDates(count: 20_000, seed: 12) {
            let text = formatterText(date)
            let read = ISO8601.date(text)
            #expect(read != nil, "the fast path refused \(text)")
            #expect(read == formatterDate(text), "for \(text)")
        }
    }

    @Test("Reading: 1 to 9 fraction digits and any ±HH:MM offset, the same Date as the formatter")
    func readsFractionsAndOffsetsLikeTheFormatter() {
        var generator = SeededGenerator(seed: 13)
        for _ in 0..<10_000 {
            let second = Int64.random(
                in: (ISO8601.firstSecond + 86_400)...(ISO8601.endSecond - 86_401), using: &generator)
            var text = String(whole.string(from: Date(timeIntervalSince1970: Double(second))).dropLast())
            let digits = Int.random(in: 0...9, using: &generator)
            if digits > 0 {
                text +=
                    "." + String((0..<digits).map { _ in Character(String(Int.random(in: 0...9, using: &generator))) })
            }
            if Bool.random(using: &generator) {
                text += "Z"
            } else {
                let hours = Int.random(in: 0...23, using: &generator)
                let minutes = Int.random(in: 0...59, using: &generator)
                text += (Bool.random(using: &generator) ? "+" : "-")
                text += (hours < 10 ? "0" : "") + String(hours) + ":" + (minutes < 10 ? "0" : "") + String(minutes)
            }
            let read = ISO8601.date(text)
            #expect(read != nil, "the fast path refused \(text)")
            #expect(read == formatterDate(text), "for \(text)")
        }
    }

    @Test(
        "Shapes the fast path leaves to the formatter are read as the formatter reads them",
        arguments: [
            "2026-02-30T16:33:10Z",  // the formatter rolls over into March
            "2023-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
            "2026-11-26T24:00:00Z",  // hour 24
            "2026-11-26T16:33:10+0100",  // offset without its colon
            "2026-11-26T16:33:10+24:00", " 2026-11-26T16:33:10Z", "2026-11-26T16:33:10.123Z ",
            "1582-10-04T00:00:00Z",  // Julian in the formatter
            "1599-12-31T23:59:59Z", "0000-01-01T00:00:00Z", "2026-11-26T16:33:10.1234567890Z",
            "2026-11-26t16:33:10z", "2026-11-26 16:33:10Z", "2026-11-26T16:33:10", "2026-11-26T16:33:10.Z",
            "2026-13-01T16:33:10Z", "2026-11-26T23:60:00Z", "2026-11-26T23:59:60Z", "+2026-11-26T16:33:10Z",
            "2026-11-26T16:33:10+01:60", "2026-11-26T16:33:1OZ", "last tuesday", "",
        ])
    func leavesOtherShapesToTheFormatter(text: String) {
        #expect(ISO8601.date(text) == nil)
        #expect(DateCoding.date(fromISO8601: text) == formatterDate(text))
    }

    @Test("The encoder writes a date's text straight into the document, the same text as Foundation's")
    func encoderWritesTheSameBytes() throws {
        struct Stamped: Codable, Equatable {
            var at: Date
            var list: [Date]
        }
        let value = Stamped(
            at: Date(timeIntervalSince1970: 1_764_066_600.25),
            list: [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -62_135_596_800)])
        let fast = try FastJSONEncoder.encode(value, dateCoding: .iso8601)
        let foundation = try JSONBody.foundationEncoder(for: .iso8601).encode(value)
        // Foundation's member order varies from run to run: compared as parsed objects.
        let fastObject = try JSONSerialization.jsonObject(with: fast) as? NSDictionary
        let foundationObject = try JSONSerialization.jsonObject(with: foundation) as? NSDictionary
        #expect(fastObject != nil && fastObject == foundationObject)
        #expect(
            String(decoding: fast, as: UTF8.self)
                == #"{"at":"2025-11-25T10:30:00.250Z","list":["1970-01-01T00:00:00Z","0001-01-03T00:00:00Z"]}"#)
        let decoded = try FastJSONDecoder.decode(Stamped.self, from: fast, dateCoding: .iso8601)
        #expect(decoded == value)
    }
}
