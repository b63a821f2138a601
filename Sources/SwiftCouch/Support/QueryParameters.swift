import Foundation

/// Builds the query parameters of an operation from typed options, skipping the ones left nil.
///
/// Every option of a query is kept as a name and a JSON value, so the same options can be sent
/// either as a query string (`GET`) or as members of a JSON body (`POST .../queries`).
struct QueryParameters: Sendable {
    /// The options, in the order they were added.
    private(set) var fields: [(name: String, value: JSONValue, isJSON: Bool)] = []

    /// Adds `name=true|false` when `value` is set.
    mutating func add(_ name: String, _ value: Bool?) {
        if let value { fields.append((name, .bool(value), false)) }
    }

    /// Adds `name=true` only when `value` is true (for flags whose `false` is the server's default).
    mutating func flag(_ name: String, _ value: Bool) {
        if value { fields.append((name, .bool(true), false)) }
    }

    /// Adds `name=N` when `value` is set.
    mutating func add(_ name: String, _ value: Int?) {
        if let value { fields.append((name, .int(Int64(value)), false)) }
    }

    /// Adds `name=text` (not JSON-quoted in a query string) when `value` is set.
    mutating func add(_ name: String, _ value: String?) {
        if let value { fields.append((name, .string(value), false)) }
    }

    /// Adds `name=<JSON text>` when `value` is set (`key="a"`, `keys=["a","b"]`).
    mutating func addJSON(_ name: String, _ value: JSONValue?) {
        if let value { fields.append((name, value, true)) }
    }

    /// Appends every field of `other`.
    mutating func append(_ other: QueryParameters) {
        fields += other.fields
    }

    /// The fields as URL query items: JSON-valued ones as JSON text, strings as they are.
    var queryItems: [URLQueryItem] {
        fields.map { field in
            if !field.isJSON, case .string(let text) = field.value {
                return URLQueryItem(name: field.name, value: text)
            }
            return URLQueryItem(name: field.name, value: Self.jsonText(field.value))
        }
    }

    /// The fields as one JSON object, for a request body.
    var jsonObject: JSONValue {
        .object(Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { _, last in last }))
    }

    static func jsonText(_ value: JSONValue) -> String {
        let data = (try? JSONBody.encode(value)) ?? Data("null".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

extension JSONValue {
    /// The JSON form of any `Encodable` value, e.g. a typed view key: `try JSONValue(encoding: key)`.
    public init<T: Encodable>(encoding value: T) throws {
        if let json = value as? JSONValue {
            self = json
            return
        }
        let data = try JSONBody.encode(value)
        self = try JSONDecoder().decode(JSONValue.self, from: data)
    }
}
