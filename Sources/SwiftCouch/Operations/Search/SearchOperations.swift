import Foundation

/// A full-text search request (Cloudant Search / CouchDB Clouseau `_search`, and the subset
/// Nouveau `_nouveau` understands). Every option but ``query`` defaults to nil: left out.
public struct SearchQuery: Encodable, Sendable, Hashable {
    /// The Lucene query, e.g. `name:alice AND age:[30 TO 40]`.
    public var query: String
    /// Continue after a previous page: its response's `bookmark`. Defaults to nil.
    public var bookmark: String?
    /// At most this many rows (the server caps it at 200). Defaults to nil (25).
    public var limit: Int?
    /// Sort by these fields (`"-age<number>"`, `"name<string>"`). Defaults to nil (by relevance).
    public var sort: [String]?
    /// Include each document. Defaults to nil (false).
    public var includeDocs: Bool?
    /// Only these stored fields in each row. Defaults to nil (all stored fields).
    public var includeFields: [String]?
    /// Count the values of these faceted fields. Defaults to nil.
    public var counts: [String]?
    /// Restrict to facet values: each entry is a field and one or more values
    /// (`["city", "Paris"]`). Defaults to nil.
    public var drilldown: [[String]]?
    /// Count numeric ranges: field → label → range (`["age": ["young": "[0 TO 30}"]]`).
    /// Defaults to nil.
    public var ranges: [String: [String: String]]?
    /// Group results by this field. Defaults to nil.
    public var groupField: String?
    /// At most this many groups. Defaults to nil.
    public var groupLimit: Int?
    /// The order of rows within a group. Defaults to nil.
    public var groupSort: [String]?
    /// Highlight matches in these fields. Defaults to nil.
    public var highlightFields: [String]?
    /// Put before each highlighted term. Defaults to nil (`<em>`).
    public var highlightPreTag: String?
    /// Put after each highlighted term. Defaults to nil (`</em>`).
    public var highlightPostTag: String?
    /// Highlighted fragments per field. Defaults to nil (1).
    public var highlightNumber: Int?
    /// Characters per highlighted fragment. Defaults to nil (100).
    public var highlightSize: Int?
    /// Bring the index up to date first. Defaults to nil (true).
    public var update: Bool?

    public init(
        _ query: String, bookmark: String? = nil, limit: Int? = nil, sort: [String]? = nil, includeDocs: Bool? = nil
    ) {
        self.query = query
        self.bookmark = bookmark
        self.limit = limit
        self.sort = sort
        self.includeDocs = includeDocs
    }

    enum CodingKeys: String, CodingKey {
        case query = "q"
        case bookmark, limit, sort, counts, drilldown, ranges, update
        case includeDocs = "include_docs"
        case includeFields = "include_fields"
        case groupField = "group_field"
        case groupLimit = "group_limit"
        case groupSort = "group_sort"
        case highlightFields = "highlight_fields"
        case highlightPreTag = "highlight_pre_tag"
        case highlightPostTag = "highlight_post_tag"
        case highlightNumber = "highlight_number"
        case highlightSize = "highlight_size"
    }

    func validate() throws(CouchError) {
        try CouchValidation.notEmpty(query, "query")
        try CouchValidation.positive(limit, "limit")
        try CouchValidation.positive(groupLimit, "groupLimit")
        try CouchValidation.positive(highlightNumber, "highlightNumber")
        try CouchValidation.positive(highlightSize, "highlightSize")
        try CouchValidation.notEmpty(sort, "sort")
        try CouchValidation.notEmpty(counts, "counts")
        if drilldown?.contains(where: { $0.count < 2 }) == true {
            throw CouchError.validation("Each drilldown entry needs a field and at least one value.")
        }
        if groupField == nil, groupLimit != nil || groupSort != nil {
            throw CouchError.validation("groupLimit and groupSort need groupField.")
        }
        let highlightOptions = [
            highlightPreTag != nil, highlightPostTag != nil, highlightNumber != nil, highlightSize != nil,
        ]
        if highlightFields == nil, highlightOptions.contains(true) {
            throw CouchError.validation("The highlight options need highlightFields.")
        }
    }

    /// The options as query items (`q` and `bookmark` as text, the rest as JSON), for `GET`.
    var queryItems: [URLQueryItem] {
        guard case .object(let members)? = try? JSONValue(encoding: self) else { return [] }
        var items = QueryParameters()
        for key in CodingKeys.allKeysInOrder where members[key.rawValue] != nil {
            let value = members[key.rawValue]
            if key == .query || key == .bookmark {
                items.add(key.rawValue, value?.stringValue)
            } else {
                items.addJSON(key.rawValue, value)
            }
        }
        return items.queryItems
    }
}

extension SearchQuery.CodingKeys {
    static let allKeysInOrder: [Self] = [
        .query, .bookmark, .limit, .sort, .includeDocs, .includeFields, .counts, .drilldown, .ranges, .groupField,
        .groupLimit, .groupSort, .highlightFields, .highlightPreTag, .highlightPostTag, .highlightNumber,
        .highlightSize, .update,
    ]
}

/// How a search request is sent.
public enum SearchMethod: Sendable, Hashable {
    /// Options in the query string.
    case get
    /// Options in a JSON body (no URL length limit).
    case post
}

/// One search hit.
public struct SearchRow<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The document id.
    public var id: String
    /// The sort values of this row (relevance score first when sorted by relevance).
    public var order: [JSONValue]
    /// The stored fields.
    public var fields: [String: JSONValue]?
    /// The document, with `includeDocs`.
    public var doc: Document?
    /// Highlighted fragments per field, with `highlightFields`.
    public var highlights: [String: [String]]?
}

/// One group of search hits, with `groupField`.
public struct SearchGroup<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The group's value.
    public var by: JSONValue
    /// Hits in the group.
    public var totalRows: Int
    /// The hits.
    public var rows: [SearchRow<Document>]

    enum CodingKeys: String, CodingKey {
        case by, rows
        case totalRows = "total_rows"
    }
}

/// What `_search` answers.
public struct SearchResponse<Document: Decodable & Sendable>: Decodable, Sendable {
    /// Hits in all.
    public var totalRows: Int
    /// Pass as ``SearchQuery/bookmark`` for the next page.
    public var bookmark: String?
    /// The hits (without `groupField`).
    public var rows: [SearchRow<Document>]
    /// Facet counts: field → value → count, with `counts`.
    public var counts: [String: [String: Int]]?
    /// Range counts: field → label → count, with `ranges`.
    public var ranges: [String: [String: Int]]?
    /// The groups, with `groupField`.
    public var groups: [SearchGroup<Document>]?

    enum CodingKeys: String, CodingKey {
        case bookmark, rows, counts, ranges, groups
        case totalRows = "total_rows"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        totalRows = try container.decode(Int.self, forKey: .totalRows)
        bookmark = try container.decodeIfPresent(String.self, forKey: .bookmark)
        rows = try container.decodeIfPresent([SearchRow<Document>].self, forKey: .rows) ?? []
        counts = try container.decodeIfPresent([String: [String: Int]].self, forKey: .counts)
        ranges = try container.decodeIfPresent([String: [String: Int]].self, forKey: .ranges)
        groups = try container.decodeIfPresent([SearchGroup<Document>].self, forKey: .groups)
    }
}

/// The location of a search index: `/{db}[/_partition/{p}]/_design/{ddoc}/{kind}/{index}`.
struct SearchIndexPath: Sendable, Hashable {
    var database: String
    var designDocument: String
    var index: String
    var partition: String?

    func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.design(designDocument)
        try CouchValidation.notEmpty(index, "index")
        try CouchValidation.partition(partition)
    }

    func path(_ kind: String) -> CouchPath {
        var segments = [database]
        if let partition { segments += ["_partition", partition] }
        segments += ["_design", CouchValidation.designName(designDocument), kind, index]
        return CouchPath(segments: segments)
    }
}

/// `GET|POST /{db}/_design/{ddoc}/_search/{index}` (or `/{db}/_partition/{p}/…`) — a full-text
/// search of a search index (IBM Cloudant, or CouchDB with Clouseau), documents decoded as
/// `Document`.
public struct SearchOperation<Document: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = SearchResponse<Document>

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
    /// `GET` or `POST`. Defaults to `.post`.
    public var httpMethod: SearchMethod

    private var body: Data?

    public init(
        database: String, designDocument: String, index: String, query: SearchQuery, partition: String? = nil,
        httpMethod: SearchMethod = .post
    ) {
        self.database = database
        self.designDocument = designDocument
        self.index = index
        self.query = query
        self.partition = partition
        self.httpMethod = httpMethod
    }

    private var location: SearchIndexPath {
        SearchIndexPath(database: database, designDocument: designDocument, index: index, partition: partition)
    }

    public func validate() throws(CouchError) {
        try location.validate()
        try query.validate()
    }

    public mutating func serialise() throws {
        body = httpMethod == .post ? try JSONBody.encode(query) : nil
    }

    public var endpoint: CouchPath { location.path("_search") }
    public var method: HTTPMethod { httpMethod == .post ? .post : .get }
    public var parameters: [URLQueryItem] { httpMethod == .get ? query.queryItems : [] }
    public var data: Data? { body }
}

/// What `_search_info` says about a search index.
public struct SearchIndexInfo: Decodable, Sendable, Equatable {
    /// The index's figures.
    public struct Details: Decodable, Sendable, Equatable {
        /// Documents indexed.
        public var docCount: Int?
        /// Deleted documents still in the index.
        public var docDelCount: Int?
        /// Size on disk, in bytes.
        public var diskSize: Int?
        /// The last sequence committed to disk.
        public var committedSeq: CouchSequence?
        /// The sequence indexing has reached.
        public var pendingSeq: CouchSequence?

        enum CodingKeys: String, CodingKey {
            case docCount = "doc_count"
            case docDelCount = "doc_del_count"
            case diskSize = "disk_size"
            case committedSeq = "committed_seq"
            case pendingSeq = "pending_seq"
        }
    }

    /// `_design/{ddoc}/{index}`.
    public var name: String
    /// The figures.
    public var searchIndex: Details

    enum CodingKeys: String, CodingKey {
        case name
        case searchIndex = "search_index"
    }
}

/// `GET /{db}/_design/{ddoc}/_search_info/{index}` — the size and progress of a search index.
public struct GetSearchInfoOperation: JSONOperation {
    public typealias Response = SearchIndexInfo

    /// The database.
    public var database: String
    /// The design document, with or without `_design/`.
    public var designDocument: String
    /// The index name.
    public var index: String

    public init(database: String, designDocument: String, index: String) {
        self.database = database
        self.designDocument = designDocument
        self.index = index
    }

    private var location: SearchIndexPath {
        SearchIndexPath(database: database, designDocument: designDocument, index: index)
    }

    public func validate() throws(CouchError) { try location.validate() }
    public var endpoint: CouchPath { location.path("_search_info") }
}

/// What Nouveau's `_nouveau_info` says about an index.
public struct NouveauIndexInfo: Decodable, Sendable, Equatable {
    /// The index's figures.
    public struct Details: Decodable, Sendable, Equatable {
        /// Documents indexed.
        public var numDocs: Int?
        /// Size on disk, in bytes.
        public var diskSize: Int?
        /// The database sequence the index has reached.
        public var updateSeq: CouchSequence?
        /// The purge sequence the index has reached.
        public var purgeSeq: CouchSequence?
        /// The index definition's signature.
        public var signature: String?

        enum CodingKeys: String, CodingKey {
            case signature
            case numDocs = "num_docs"
            case diskSize = "disk_size"
            case updateSeq = "update_seq"
            case purgeSeq = "purge_seq"
        }
    }

    /// `_design/{ddoc}/{index}`.
    public var name: String
    /// The figures.
    public var searchIndex: Details

    enum CodingKeys: String, CodingKey {
        case name
        case searchIndex = "search_index"
    }
}

/// `GET /{db}/_design/{ddoc}/_nouveau_info/{index}` — the size and progress of a CouchDB Nouveau
/// index.
public struct GetNouveauInfoOperation: JSONOperation {
    public typealias Response = NouveauIndexInfo

    /// The database.
    public var database: String
    /// The design document, with or without `_design/`.
    public var designDocument: String
    /// The index name.
    public var index: String

    public init(database: String, designDocument: String, index: String) {
        self.database = database
        self.designDocument = designDocument
        self.index = index
    }

    private var location: SearchIndexPath {
        SearchIndexPath(database: database, designDocument: designDocument, index: index)
    }

    public func validate() throws(CouchError) { try location.validate() }
    public var endpoint: CouchPath { location.path("_nouveau_info") }
}

/// What `_search_analyze` answers: the tokens an analyzer makes of a text.
public struct AnalyzedTokens: Decodable, Sendable, Equatable {
    public var tokens: [String]
}

/// `POST /_search_analyze` — how an analyzer (`standard`, `keyword`, `english`, ...) splits a
/// text into tokens.
public struct SearchAnalyzeOperation: JSONOperation, IdempotentOperation {
    public typealias Response = AnalyzedTokens

    /// The analyzer name.
    public var analyzer: String
    /// The text to analyze.
    public var text: String

    private var body: Data?

    public init(analyzer: String, text: String) {
        self.analyzer = analyzer
        self.text = text
    }

    public func validate() throws(CouchError) { try CouchValidation.notEmpty(analyzer, "analyzer") }
    public mutating func serialise() throws { body = try JSONBody.encode(["analyzer": analyzer, "text": text]) }

    public var endpoint: CouchPath { CouchPath("_search_analyze") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}
