import Foundation

/// An opaque position in a database's history: `seq`, `last_seq`, `update_seq`, `since`.
///
/// CouchDB 2 and later send strings (`"7-g1AAAA…"`), CouchDB 1.x and some proxies numbers; a
/// sequence is only ever compared for equality and passed back as `since`. Use ``now`` to start
/// at the current end of a feed.
public struct CouchSequence: Sendable, Hashable, Codable, CustomStringConvertible, ExpressibleByStringLiteral,
    ExpressibleByIntegerLiteral
{
    /// The sequence exactly as the server sent it (a string, a number, or — very old servers —
    /// an array).
    public var json: JSONValue

    /// A sequence from its text (as sent in `since=`).
    public init(_ text: String) { json = .string(text) }

    /// A numeric sequence (CouchDB 1.x).
    public init(_ number: Int) { json = .int(Int64(number)) }

    /// A sequence from any JSON value the server sent.
    public init(json: JSONValue) { self.json = json }

    public init(stringLiteral value: String) { self.init(value) }
    public init(integerLiteral value: Int) { self.init(value) }

    /// `since=now`: only changes made after the request.
    public static let now = CouchSequence("now")
    /// `since=0`: from the beginning.
    public static let beginning = CouchSequence(0)

    public init(from decoder: any Decoder) throws {
        json = try JSONValue(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        try json.encode(to: encoder)
    }

    /// The text sent in a query parameter: a string as it is, anything else as JSON text.
    public var queryValue: String {
        switch json {
        case .string(let text): return text
        case .int(let number): return String(number)
        default:
            let data = (try? JSONBody.encode(json)) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
    }

    public var description: String { queryValue }
}
