import Foundation

/// One Nouveau hit.
public struct NouveauHit<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The document id.
    public var id: String
    /// The sort values of this hit.
    public var order: [JSONValue]
    /// The stored fields.
    public var fields: [String: JSONValue]?
    /// The document, with `includeDocs`.
    public var doc: Document?
}

/// What `_nouveau` answers.
public struct NouveauSearchResponse<Document: Decodable & Sendable>: Decodable, Sendable {
    /// Hits in all (a lower bound when ``totalHitsRelation`` is `GREATER_THAN_OR_EQUAL_TO`).
    public var totalHits: Int
    /// `EQUAL_TO` or `GREATER_THAN_OR_EQUAL_TO`.
    public var totalHitsRelation: String?
    /// The hits.
    public var hits: [NouveauHit<Document>]
    /// Pass as ``SearchQuery/bookmark`` for the next page.
    public var bookmark: String?
    /// Facet counts, with `counts`.
    public var counts: [String: [String: Int]]?
    /// Range counts, with `ranges`.
    public var ranges: [String: [String: Int]]?

    enum CodingKeys: String, CodingKey {
        case hits, bookmark, counts, ranges
        case totalHits = "total_hits"
        case totalHitsRelation = "total_hits_relation"
    }
}

/// `POST /{db}/_design/{ddoc}/_nouveau/{index}` (or `/{db}/_partition/{p}/…`) — a search of a
/// Nouveau index (CouchDB 3.4+).
///
/// Takes the same ``SearchQuery``; Nouveau understands `q`, `bookmark`, `limit`, `sort`,
/// `include_docs`, `counts`, `ranges` and `update`, and the other options are refused by
/// `validate`.
public struct NouveauSearchOperation<Document: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = NouveauSearchResponse<Document>

    /// The database.
    public var database: String
    /// The design document holding the index, with or without `_design/`.
    public var designDocument: String
    /// The index name.
    public var index: String
    /// The query and its options.
    public var query: SearchQuery
    /// Search only this partition of a partitioned database. Defaults to nil.
    public var partition: String?

    private var body: Data?

    public init(
        database: String, designDocument: String, index: String, query: SearchQuery, partition: String? = nil
    ) {
        self.database = database
        self.designDocument = designDocument
        self.index = index
        self.query = query
        self.partition = partition
    }

    private var location: SearchIndexPath {
        SearchIndexPath(database: database, designDocument: designDocument, index: index, partition: partition)
    }

    public func validate() throws(CouchError) {
        try location.validate()
        try query.validate()
        let unsupported =
            query.includeFields != nil || query.drilldown != nil || query.groupField != nil
            || query.highlightFields != nil
        if unsupported {
            throw CouchError.validation("Nouveau does not support includeFields, drilldown, grouping or highlighting.")
        }
    }

    public mutating func serialise() throws { body = try JSONBody.encode(query) }

    public var endpoint: CouchPath { location.path("_nouveau") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}
