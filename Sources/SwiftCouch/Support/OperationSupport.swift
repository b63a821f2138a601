import Foundation

/// Checks shared by many operations' `validate()`.
enum OptionCheck {
    /// `value`, when set, must be zero or more.
    static func nonNegative(_ value: Int?, _ name: String) throws(CouchError) {
        if let value, value < 0 { throw CouchError.validation("\(name) must not be negative (got \(value)).") }
    }

    /// `value`, when set, must be one or more.
    static func positive(_ value: Int?, _ name: String) throws(CouchError) {
        if let value, value < 1 { throw CouchError.validation("\(name) must be at least 1 (got \(value)).") }
    }

    /// `value` must not be empty.
    static func notEmpty(_ value: String, _ name: String) throws(CouchError) {
        if value.isEmpty { throw CouchError.validation("\(name) must not be empty.") }
    }

    /// `values`, when set, must not be empty.
    static func notEmpty<C: Collection>(_ values: C?, _ name: String) throws(CouchError) {
        if let values, values.isEmpty { throw CouchError.validation("\(name) must not be empty.") }
    }

    /// Every revision in a `{docid: [rev]}` map must be valid, and the map must not be empty.
    static func revisionMap(_ map: [String: [String]], _ name: String) throws(CouchError) {
        guard !map.isEmpty else { throw CouchError.validation("\(name) must name at least one document.") }
        for (id, revisions) in map.sorted(by: { $0.key < $1.key }) {
            guard !id.isEmpty else { throw CouchError.validation("\(name) has an empty document id.") }
            guard !revisions.isEmpty else {
                throw CouchError.validation("\(name) lists no revisions for document '\(id)'.")
            }
            for revision in revisions { try CouchValidation.validateRevision(revision) }
        }
    }
}

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
