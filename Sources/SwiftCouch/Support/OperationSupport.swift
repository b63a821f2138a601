import Foundation

/// The one way SwiftCouch writes JSON: request bodies, documents, JSON-valued query parameters.
/// One shared encoder per ``DateCoding`` (compact, `/` not escaped), configured once and used
/// from any thread (`JSONEncoder` is safe to share once configured); dates as the client in
/// effect says.
enum JSONBody {
    private static let encoders: [JSONEncoder] = DateCoding.byIndex.map { coding in
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        encoder.dateEncodingStrategy = coding.encodingStrategy
        return encoder
    }

    /// The shared Foundation encoder for `coding`: what ``FastJSON`` falls back to for anything its
    /// own encoder does not write exactly as this one would.
    static func foundationEncoder(for coding: DateCoding) -> JSONEncoder { encoders[coding.index] }

    /// The JSON text of `value` (``FastJSON``: written straight into one buffer; Foundation's
    /// encoder for what it does not cover), dates as the client in effect says.
    static func encode<Value: Encodable>(_ value: Value) throws -> Data {
        try FastJSON.encode(value, dateCoding: DateCoding.current)
    }

    /// A document body: the JSON text of `document`, which must be a JSON object, as CouchDB insists.
    static func document<T: Encodable>(_ document: T) throws -> Data {
        let body = try encode(document)
        guard body.first == UInt8(ascii: "{") else { throw notAnObject(T.self) }
        return body
    }

    /// Appends the JSON text of `document` (which must be a JSON object) to `bytes`: many
    /// documents encoded into one buffer, with no `Data` per document. `bytes` is left as it was
    /// when this throws.
    /// Returns the document's top-level `_id` and `_rev` strings when the encoder recorded them
    /// (nil: read them from the bytes). Dates are written as `dateCoding` says (by default, as the
    /// operation being serialised says).
    @discardableResult
    static func appendDocument<T: Encodable, Sink: JSONByteSink>(
        _ document: T, to bytes: inout Sink, dateCoding: DateCoding = DateCoding.current
    ) throws -> DocumentIDAndRev? {
        let start = bytes.count
        let idAndRev = try FastJSON.encodeDocument(document, dateCoding: dateCoding, into: &bytes)
        guard bytes.count > start, bytes.jsonByte(at: start) == UInt8(ascii: "{") else {
            bytes.truncateJSON(to: start)
            throw notAnObject(T.self)
        }
        return idAndRev
    }

    private static func notAnObject(_ type: Any.Type) -> CouchError {
        CouchError.serialisation("A document must encode to a JSON object, not \(type) as a scalar or array.")
    }

    /// A JSON string literal for `value` (`"a\"b"`), for query parameters.
    static func stringLiteral(_ value: String) -> String {
        let data = (try? encode(value)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
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
