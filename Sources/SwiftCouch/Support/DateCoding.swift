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
    static var current: DateCoding {
        (Thread.current.threadDictionary[threadKey] as? Box)?.coding ?? .iso8601
    }

    /// Runs `body` with `coding` in effect on this thread (the pipeline's steps are synchronous).
    static func with<T, E: Error>(_ coding: DateCoding, _ body: () throws(E) -> T) throws(E) -> T {
        let dictionary = Thread.current.threadDictionary
        let previous = dictionary[threadKey]
        dictionary[threadKey] = Box(coding)
        defer { dictionary[threadKey] = previous }
        return try body()
    }

    private static let threadKey = "SwiftCouch.DateCoding"
    private final class Box {
        let coding: DateCoding
        init(_ coding: DateCoding) { self.coding = coding }
    }

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

    /// `2026-11-25T10:30:00Z`, or with milliseconds when the date has a fraction of a second.
    static func iso8601Text(_ date: Date) -> String {
        let whole = date.timeIntervalSince1970.rounded(.down) == date.timeIntervalSince1970
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = whole ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    static func date(fromISO8601 text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

extension JSONDecoder {
    /// A decoder reading dates as the client in effect says (``DateCoding``).
    static var couch: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = DateCoding.current.decodingStrategy
        return decoder
    }
}
