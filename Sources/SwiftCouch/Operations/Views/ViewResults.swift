import Foundation

/// The answer of a view, `_all_docs`, `_design_docs` or `_local_docs` query: the rows and the
/// counts around them.
public struct ViewResponse<Row: Decodable & Sendable>: Decodable, Sendable {
    /// The number of rows in the whole index (absent for reduced results; null for `_local_docs`;
    /// for a partition query, the count of the shard that holds the partition).
    public var totalRows: Int?
    /// Where the first row sits in the index (null with `keys`, absent for reduced results).
    public var offset: Int?
    /// The database's update sequence, with `updateSeq: true`.
    public var updateSeq: CouchSequence?
    /// The rows.
    public var rows: [Row]

    public init(totalRows: Int?, offset: Int?, updateSeq: CouchSequence?, rows: [Row]) {
        self.totalRows = totalRows
        self.offset = offset
        self.updateSeq = updateSeq
        self.rows = rows
    }

    enum CodingKeys: String, CodingKey {
        case rows, offset
        case totalRows = "total_rows"
        case updateSeq = "update_seq"
    }
}

extension ViewResponse: Equatable where Row: Equatable {}

/// The answer of a multi-query `POST .../queries`: one ``ViewResponse`` per query, in order.
public struct ViewQueriesResponse<Row: Decodable & Sendable>: Decodable, Sendable {
    /// One result per query, in the order of the queries.
    public var results: [ViewResponse<Row>]

    public init(results: [ViewResponse<Row>]) { self.results = results }
}

/// One row of a view: the emitting document's `id`, the emitted `key` and `value`, and with
/// `includeDocs` the document.
///
/// Choose the types you expect (`ViewRow<String, Int, Recipe>`), or ``JSONValue`` for any.
/// Reduced rows have no `id` and, without grouping, a `null` key: use an optional or
/// ``JSONValue`` key type for them.
public struct ViewRow<Key: Decodable & Sendable, Value: Decodable & Sendable, Doc: Decodable & Sendable>: Decodable,
    Sendable
{
    /// The id of the document that emitted the row (nil for reduced rows).
    public var id: String?
    /// The emitted key.
    public var key: Key
    /// The emitted (or reduced) value.
    public var value: Value
    /// The document, with `includeDocs` (nil when it was deleted, or the row was emitted for a
    /// document id that does not exist).
    public var doc: Doc?

    public init(id: String?, key: Key, value: Value, doc: Doc?) {
        self.id = id
        self.key = key
        self.value = value
        self.doc = doc
    }

    public init(from decoder: any Decoder) throws {
        if let reader = FastJSONObjectReader(decoder), let row = try Self.read(reader) {
            self = row
            return
        }
        let container = try decoder.container(keyedBy: ViewRowKey.self)
        id = try container.decodeIfPresent(String.self, forKey: .id)
        key = try container.decode(Key.self, forKey: .key)
        value = try container.decode(Value.self, forKey: .value)
        doc = try container.decodeIfPresent(Doc.self, forKey: .doc)
    }
}

extension ViewRow {
    /// The row read without a keyed container (see ``FastJSONObjectReader``), or nil when something is
    /// not as expected. The members the caller's types decode come last, in the container's order, once
    /// the others are checked.
    static func read(_ reader: FastJSONObjectReader) throws -> Self? {
        guard case .some(let id) = reader.optionalString(ViewRowKey.id), reader.contains(ViewRowKey.key),
            reader.contains(ViewRowKey.value)
        else { return nil }
        return ViewRow(
            id: id, key: try reader.decode(Key.self, ViewRowKey.key),
            value: try reader.decode(Value.self, ViewRowKey.value),
            doc: try reader.decodeIfPresent(Doc.self, ViewRowKey.doc))
    }
}

/// The members of a ``ViewRow``, outside the generic type so that reading them needs no generic
/// metadata per row.
enum ViewRowKey: String, CodingKey {
    case id, key, value, doc
}

extension ViewRow: Equatable where Key: Equatable, Value: Equatable, Doc: Equatable {}

/// One row of `_all_docs`, `_design_docs`, `_local_docs` or a partition's `_all_docs`.
///
/// A key given in `keys` that matches no document gives a row with `error` (`not_found`) and no
/// `id`; a deleted document gives a row whose `value.deleted` is true and whose `doc` is nil.
public struct AllDocsRow<Doc: Decodable & Sendable>: Decodable, Sendable {
    /// The current revision of a document, and whether it is deleted.
    public struct Value: Codable, Sendable, Hashable {
        /// The winning revision.
        public var rev: String
        /// True when the document is deleted (only reported for rows asked for by `keys`).
        public var deleted: Bool?

        public init(rev: String, deleted: Bool? = nil) {
            self.rev = rev
            self.deleted = deleted
        }
    }

    /// The document id (nil for an error row).
    public var id: String?
    /// The key: the document id, or the key asked for.
    public var key: String
    /// The revision (nil for an error row).
    public var value: Value?
    /// The document, with `includeDocs` (nil for deleted documents and error rows).
    public var doc: Doc?
    /// Why there is no document for this key (`not_found`), for rows asked for by `keys`.
    public var error: String?

    public init(id: String?, key: String, value: Value?, doc: Doc? = nil, error: String? = nil) {
        self.id = id
        self.key = key
        self.value = value
        self.doc = doc
        self.error = error
    }

    /// True when the row names a live document.
    public var exists: Bool { error == nil && value?.deleted != true }

    public init(from decoder: any Decoder) throws {
        if let reader = FastJSONObjectReader(decoder), let fields = AllDocsRowFields(reader) {
            self = try Self(fields, doc: reader)
            return
        }
        let container = try decoder.container(keyedBy: AllDocsRowKey.self)
        id = try container.decodeIfPresent(String.self, forKey: .id)
        key = try container.decode(String.self, forKey: .key)
        value = try container.decodeIfPresent(Value.self, forKey: .value)
        doc = try container.decodeIfPresent(Doc.self, forKey: .doc)
        error = try container.decodeIfPresent(String.self, forKey: .error)
    }

    /// The row read without a keyed container (see ``FastJSONObjectReader``), or nil when something is
    /// not as expected: every member but the document is checked first, so the document is decoded
    /// at most once.
    static func read(_ reader: FastJSONObjectReader) throws -> Self? {
        guard let fields = AllDocsRowFields(reader) else { return nil }
        return try Self(fields, doc: reader)
    }

    /// The row from its checked members, and the document read from `reader`. The fields are
    /// set one by one rather than through the memberwise initializer: on the per-row path each
    /// generic call costs its own generic-metadata look-ups.
    private init(_ fields: AllDocsRowFields, doc reader: FastJSONObjectReader) throws {
        id = fields.id
        key = fields.key
        value = fields.rev.map { Value(rev: $0, deleted: fields.deleted) }
        error = fields.error
        doc = try reader.decodeIfPresent(Doc.self, AllDocsRowKey.doc)
    }
}

/// The members of an ``AllDocsRow`` but its document, read and checked outside the generic type
/// (no generic metadata per row); nil when something is not as expected.
struct AllDocsRowFields {
    var id: String?
    var key: String
    var rev: String?
    var deleted: Bool?
    var error: String?

    init?(_ reader: FastJSONObjectReader) {
        guard case .some(let id) = reader.optionalString(AllDocsRowKey.id),
            let key = reader.string(AllDocsRowKey.key),
            case .some(let valueObject) = reader.optionalObject(AllDocsRowKey.value),
            case .some(let error) = reader.optionalString(AllDocsRowKey.error)
        else { return nil }
        (self.id, self.key, self.error) = (id, key, error)
        if let valueObject {
            guard let rev = valueObject.string(AllDocsRowKey.rev),
                case .some(let deleted) = valueObject.optionalBool(AllDocsRowKey.deleted)
            else { return nil }
            (self.rev, self.deleted) = (rev, deleted)
        }
    }
}

/// The members of an ``AllDocsRow`` (and of its value), outside the generic type so that reading them
/// needs no generic metadata per row.
enum AllDocsRowKey: String, CodingKey {
    case id, key, value, doc, error, rev, deleted
}

extension AllDocsRow: Equatable where Doc: Equatable {}
