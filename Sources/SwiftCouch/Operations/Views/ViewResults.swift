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
}

extension AllDocsRow: Equatable where Doc: Equatable {}
