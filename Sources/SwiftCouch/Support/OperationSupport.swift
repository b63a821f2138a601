import Foundation

/// Encodes request bodies.
enum JSONBody {
    /// The JSON text of `value`, with SwiftCouch's encoder.
    static func encode<Value: Encodable>(_ value: Value) throws -> Data {
        try JSONEncoder.couch.encode(value)
    }

    /// Headers for a `POST` that carries no body but must say `Content-Type: application/json`
    /// (CouchDB answers 415 to `_compact`, `_view_cleanup` and `_ensure_full_commit` without it).
    static let emptyPostHeaders: HTTPFields = ["Content-Type": "application/json"]
}

/// A `CodingKey` for members whose names are only known at run time.
struct DynamicCodingKey: CodingKey, Hashable {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
