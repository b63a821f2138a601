import Foundation

/// Which list of documents an ``AllDocsOperation`` reads.
public enum AllDocsSource: Sendable, Hashable {
    /// Every document, design documents included (`_all_docs`).
    case documents
    /// Only design documents (`_design_docs`).
    case designDocuments
    /// Only `_local` documents, which `_all_docs` never lists (`_local_docs`).
    case localDocuments
    /// The documents of one partition of a partitioned database
    /// (`/{db}/_partition/{partition}/_all_docs`).
    case partition(String)

    func path(_ database: String) -> CouchPath {
        switch self {
        case .documents: return CouchPath(database, "_all_docs")
        case .designDocuments: return CouchPath(database, "_design_docs")
        case .localDocuments: return CouchPath(database, "_local_docs")
        case .partition(let name): return CouchPath(database, "_partition", name, "_all_docs")
        }
    }

    func validate() throws(CouchError) {
        if case .partition(let name) = self { try CouchValidation.partition(name) }
    }
}

/// `GET /{db}/_all_docs` (and `_design_docs`, `_local_docs`, `_partition/{p}/_all_docs`) —
/// lists documents by id, with their current revision and optionally the documents.
///
/// With `keys` the operation sends `POST /{db}/_all_docs` with `{"keys": [...]}` (a read, so it
/// is safe to retry): rows come in the order of the keys, deleted documents are reported with
/// `value.deleted`, and keys that match nothing give an error row. `Doc` is the type of the
/// included documents (``JSONValue`` for any; it is not read without `includeDocs`).
public struct AllDocsOperation<Doc: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = ViewResponse<AllDocsRow<Doc>>

    /// The database name.
    public var database: String
    /// Which documents to list. Defaults to `.documents`.
    public var source: AllDocsSource
    /// The query options. Defaults to none.
    public var options: KeyRangeOptions

    private var body: Data?

    public init(database: String, source: AllDocsSource = .documents, options: KeyRangeOptions = .init()) {
        self.database = database
        self.source = source
        self.options = options
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try source.validate()
        try options.validate()
        try options.validateDocumentIDKeys()
    }

    public mutating func serialise() throws { body = try RowQueryRequest.body(keys: options.keys) }

    public var endpoint: CouchPath { source.path(database) }
    public var method: HTTPMethod { body == nil ? .get : .post }
    public var data: Data? { body }
    public var parameters: [URLQueryItem] { options.parameters(includingKeys: false).queryItems }
}

extension KeyRangeOptions {
    /// `_all_docs` is keyed by document id: its keys must be non-empty strings.
    func validateDocumentIDKeys() throws(CouchError) {
        let given = [key, startKey, endKey].compactMap { $0 } + (keys ?? [])
        for value in given {
            guard case .string(let id) = value, !id.isEmpty else {
                throw CouchError.validation("_all_docs keys are document ids (non-empty strings), not \(value).")
            }
        }
    }
}

/// `POST /{db}/_all_docs/queries` (and `_design_docs/queries`, `_local_docs/queries`) — several
/// `_all_docs` queries in one request; one result per query, in order.
public struct AllDocsQueriesOperation<Doc: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = ViewQueriesResponse<AllDocsRow<Doc>>

    /// The database name.
    public var database: String
    /// Which documents to list (not `.partition`, which has no multi-query endpoint). Defaults to `.documents`.
    public var source: AllDocsSource
    /// The queries, each with its own options (`keys` included).
    public var queries: [KeyRangeOptions]

    private var body: Data?

    public init(database: String, source: AllDocsSource = .documents, queries: [KeyRangeOptions]) {
        self.database = database
        self.source = source
        self.queries = queries
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        if case .partition = source {
            throw CouchError.validation("A partition's _all_docs has no /queries endpoint; send one query per request.")
        }
        try RowQueryRequest.validate(queries: queries.count)
        for query in queries {
            try query.validate()
            try query.validateDocumentIDKeys()
        }
    }

    public mutating func serialise() throws {
        body = try RowQueryRequest.body(queries: queries.map { $0.parameters(includingKeys: true) })
    }

    public var endpoint: CouchPath { source.path(database).appending("queries") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}
