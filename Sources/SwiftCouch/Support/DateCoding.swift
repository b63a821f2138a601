import Foundation

/// How `Date` values in documents (and every other JSON body) are written and read.
///
/// The default, ``iso8601``, writes ISO-8601 text (`"2026-11-25T10:30:00Z"`), which views,
/// Mango selectors, other clients and people read naturally and which sorts as text; it reads
/// ISO-8601 with or without fractional seconds. Foundation's own default (seconds since 2001 as a
/// number) is ``foundationDefault``. Set per client with ``Configuration/dateCoding``.
public enum DateCoding: Sendable, Hashable {
    /// ISO-8601 text in UTC (`2026-11-25T10:30:00Z`; fractional seconds are kept when present,
    /// and accepted when reading).
    case iso8601
    /// Seconds since 1970 as a number (JavaScript's `Date.now() / 1000`).
    case secondsSince1970
    /// Milliseconds since 1970 as a number (JavaScript's `Date.now()`).
    case millisecondsSince1970
    /// Foundation's default: seconds since 1 January 2001 as a number.
    case foundationDefault

    /// The coding in effect on this thread: the running client's, while the pipeline serialises a
    /// body or reads a response; ``iso8601`` otherwise.
    static var current: DateCoding { ThreadDateCoding.get() }

    /// Runs `body` with `coding` in effect on this thread (the pipeline's steps are synchronous).
    static func with<T, E: Error>(_ coding: DateCoding, _ body: () throws(E) -> T) throws(E) -> T {
        let previous = ThreadDateCoding.get()
        if previous == coding { return try body() }
        ThreadDateCoding.set(coding)
        defer { ThreadDateCoding.set(previous) }
        return try body()
    }

    /// The position of the case in `allCases` order, for the thread-local slot.
    var index: Int {
        switch self {
        case .iso8601: 0
        case .secondsSince1970: 1
        case .millisecondsSince1970: 2
        case .foundationDefault: 3
        }
    }

    static let byIndex: [DateCoding] = [.iso8601, .secondsSince1970, .millisecondsSince1970, .foundationDefault]

    var encodingStrategy: JSONEncoder.DateEncodingStrategy {
        switch self {
        case .iso8601:
            return .custom { date, encoder in
                var container = encoder.singleValueContainer()
                try container.encode(Self.iso8601Text(date))
            }
        case .secondsSince1970: return .secondsSince1970
        case .millisecondsSince1970: return .millisecondsSince1970
        case .foundationDefault: return .deferredToDate
        }
    }

    var decodingStrategy: JSONDecoder.DateDecodingStrategy {
        switch self {
        case .iso8601:
            return .custom { decoder in
                let container = try decoder.singleValueContainer()
                let text = try container.decode(String.self)
                guard let date = Self.date(fromISO8601: text) else {
                    throw DecodingError.dataCorruptedError(
                        in: container, debugDescription: "'\(text)' is not an ISO-8601 date")
                }
                return date
            }
        case .secondsSince1970: return .secondsSince1970
        case .millisecondsSince1970: return .millisecondsSince1970
        case .foundationDefault: return .deferredToDate
        }
    }

    /// `2026-11-25T10:30:00Z`, or with milliseconds when the date has a fraction of a second
    /// (written by hand, exactly as `ISO8601DateFormatter` would; the formatter itself only for
    /// dates outside 1600–9999).
    static func iso8601Text(_ date: Date) -> String {
        ISO8601.text(date) ?? formatterISO8601Text(date)
    }

    /// ``iso8601Text(_:)`` by `ISO8601DateFormatter`, for the dates ``ISO8601`` leaves to it.
    static func formatterISO8601Text(_ date: Date) -> String {
        let whole = date.timeIntervalSince1970.rounded(.down) == date.timeIntervalSince1970
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = whole ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    /// The date of ISO-8601 `text`, with or without fractions of a second and with any offset: the
    /// usual shapes read by hand (``ISO8601/date(_:)``), anything else as `ISO8601DateFormatter`
    /// reads it.
    static func date(fromISO8601 text: String) -> Date? {
        if let date = ISO8601.date(text) { return date }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// The date coding in effect on the current thread (no allocation, no dictionary: it is read for
/// every body written and every response read).
private enum ThreadDateCoding {
    private static let slot = ThreadSlot()

    static func get() -> DateCoding {
        let value = slot.value
        return value == 0 ? .iso8601 : DateCoding.byIndex[value - 1]
    }

    static func set(_ coding: DateCoding) { slot.value = coding.index + 1 }
}

extension JSONDecoder {
    /// The shared decoder for each date coding: configured once, then only read (a configured
    /// `JSONDecoder` may decode on any thread).
    private static let couchDecoders: [JSONDecoder] = DateCoding.byIndex.map { coding in
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = coding.decodingStrategy
        return decoder
    }

    /// A decoder reading dates as the client in effect says (``DateCoding``); shared, not made per call.
    static var couch: JSONDecoder { couch(for: DateCoding.current) }

    /// The shared decoder reading dates as `coding` says.
    static func couch(for coding: DateCoding) -> JSONDecoder { couchDecoders[coding.index] }

    /// Whether `decoder` is one of the shared decoders (an operation that did not choose its own).
    static func isCouchDefault(_ decoder: JSONDecoder) -> Bool {
        couchDecoders.contains { $0 === decoder }
    }
}
