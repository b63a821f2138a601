import Foundation

/// One sort key of a Mango query or a field of a JSON index: a field name with an optional
/// direction.
///
/// A string literal is a field with no direction (`"age"`, sent as `"age"`); use
/// ``ascending(_:)`` or ``descending(_:)`` to send `{"age":"asc"}` / `{"age":"desc"}`.
public struct SortField: Codable, Sendable, Hashable, ExpressibleByStringLiteral {
    /// A sort direction.
    public enum Direction: String, Codable, Sendable, Hashable {
        case ascending = "asc"
        case descending = "desc"
    }

    /// The field path.
    public var field: String
    /// The direction; nil sends the bare field name (ascending).
    public var direction: Direction?

    public init(_ field: String, _ direction: Direction? = nil) {
        self.field = field
        self.direction = direction
    }

    public init(stringLiteral value: String) { self.init(value) }

    /// `{"field":"asc"}`.
    public static func ascending(_ field: String) -> SortField { SortField(field, .ascending) }
    /// `{"field":"desc"}`.
    public static func descending(_ field: String) -> SortField { SortField(field, .descending) }

    public init(from decoder: any Decoder) throws {
        if let name = try? decoder.singleValueContainer().decode(String.self) {
            self.init(name)
            return
        }
        let object = try [String: Direction](from: decoder)
        guard object.count == 1, let (field, direction) = object.first else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "A sort field is one {field: direction}."))
        }
        self.init(field, direction)
    }

    public func encode(to encoder: any Encoder) throws {
        guard let direction else {
            var container = encoder.singleValueContainer()
            try container.encode(field)
            return
        }
        var container = encoder.container(keyedBy: DynamicCodingKey.self)
        try container.encode(direction, forKey: DynamicCodingKey(field))
    }
}

/// Which index a query should use (`use_index`).
public enum IndexReference: Sendable, Hashable, Encodable {
    /// Any index in this design document (`"ddoc"`).
    case designDocument(String)
    /// One named index (`["ddoc", "name"]`).
    case index(designDocument: String, name: String)

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .designDocument(let ddoc): try container.encode(ddoc)
        case .index(let ddoc, let name): try container.encode([ddoc, name])
        }
    }

    var isValid: Bool {
        switch self {
        case .designDocument(let ddoc): return !CouchValidation.designName(ddoc).isEmpty
        case .index(let ddoc, let name): return !CouchValidation.designName(ddoc).isEmpty && !name.isEmpty
        }
    }
}

/// A Mango query: the body of `_find` and `_explain`.
///
/// Every option but ``selector`` defaults to nil: left out of the body, so the server's default
/// applies.
public struct MangoQuery: Encodable, Sendable, Hashable {
    /// Which documents match.
    public var selector: Selector
    /// Only these fields of each document (`_id`, `name`, `address.city`). Defaults to nil (the
    /// whole documents).
    public var fields: [String]?
    /// The order; needs an index on these fields. Defaults to nil.
    public var sort: [SortField]?
    /// At most this many documents. Defaults to nil (the server's 25).
    public var limit: Int?
    /// Skip this many documents first. Defaults to nil.
    public var skip: Int?
    /// Continue after a previous page: its response's `bookmark`. Defaults to nil.
    public var bookmark: String?
    /// Which index to use. Defaults to nil (the server chooses).
    public var useIndex: IndexReference?
    /// Read quorum (`r`). Defaults to nil (the server's 1).
    public var readQuorum: Int?
    /// Include `_conflicts` in each document. Defaults to nil (false).
    public var conflicts: Bool?
    /// Bring the index up to date before answering. Defaults to nil (true).
    public var update: Bool?
    /// Use the same shard copies for every request (stable results). Defaults to nil (false).
    public var stable: Bool?
    /// Include ``FindResponse/executionStats``. Defaults to nil (false).
    public var executionStats: Bool?
    /// Let the server fall back to another index (or a full scan) when ``useIndex`` cannot be
    /// used (CouchDB 3.3+). Defaults to nil (true).
    public var allowFallback: Bool?

    public init(
        selector: Selector, fields: [String]? = nil, sort: [SortField]? = nil, limit: Int? = nil, skip: Int? = nil,
        bookmark: String? = nil, useIndex: IndexReference? = nil, readQuorum: Int? = nil, conflicts: Bool? = nil,
        update: Bool? = nil, stable: Bool? = nil, executionStats: Bool? = nil, allowFallback: Bool? = nil
    ) {
        self.selector = selector
        self.fields = fields
        self.sort = sort
        self.limit = limit
        self.skip = skip
        self.bookmark = bookmark
        self.useIndex = useIndex
        self.readQuorum = readQuorum
        self.conflicts = conflicts
        self.update = update
        self.stable = stable
        self.executionStats = executionStats
        self.allowFallback = allowFallback
    }

    enum CodingKeys: String, CodingKey {
        case selector, fields, sort, limit, skip, bookmark, conflicts, update, stable
        case useIndex = "use_index"
        case readQuorum = "r"
        case executionStats = "execution_stats"
        case allowFallback = "allow_fallback"
    }

    func validate() throws(CouchError) {
        try selector.validate()
        try CouchValidation.notEmpty(fields, "fields")
        if fields?.contains(where: \.isEmpty) == true { throw CouchError.validation("fields must not contain \"\".") }
        try CouchValidation.notEmpty(sort, "sort")
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
        try CouchValidation.positive(readQuorum, "readQuorum (r)")
        if let bookmark { try CouchValidation.notEmpty(bookmark, "bookmark") }
        if let useIndex, !useIndex.isValid {
            throw CouchError.validation("useIndex needs a design document name (and an index name when given).")
        }
    }
}

/// A Mango request: a query for the whole database or one partition (`_find`, `_explain`).
struct MangoRequest {
    var database: String
    var query: MangoQuery
    var partition: String?

    func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.partition(partition)
        try query.validate()
    }

    func body() throws -> Data { try JSONBody.encode(query) }

    func path(_ endpoint: String) -> CouchPath {
        guard let partition else { return CouchPath(database, endpoint) }
        return CouchPath(database, "_partition", partition, endpoint)
    }
}

/// How long a Mango query took and how much it read.
public struct ExecutionStats: Codable, Sendable, Equatable {
    /// Index keys read.
    public var totalKeysExamined: Int
    /// Documents read.
    public var totalDocsExamined: Int
    /// Documents read with a read quorum.
    public var totalQuorumDocsExamined: Int
    /// Documents returned.
    public var resultsReturned: Int
    /// Time taken, in milliseconds.
    public var executionTimeMs: Double

    enum CodingKeys: String, CodingKey {
        case totalKeysExamined = "total_keys_examined"
        case totalDocsExamined = "total_docs_examined"
        case totalQuorumDocsExamined = "total_quorum_docs_examined"
        case resultsReturned = "results_returned"
        case executionTimeMs = "execution_time_ms"
    }
}

/// What `_find` answers.
public struct FindResponse<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The matching documents (only the asked-for ``MangoQuery/fields`` of each).
    public var docs: [Document]
    /// Pass as ``MangoQuery/bookmark`` to get the next page.
    public var bookmark: String?
    /// A hint from the server, e.g. "No matching index found, create an index to optimize query
    /// time."
    public var warning: String?
    /// Present when ``MangoQuery/executionStats`` was true.
    public var executionStats: ExecutionStats?

    enum CodingKeys: String, CodingKey {
        case docs, bookmark, warning
        case executionStats = "execution_stats"
    }
}

extension FindResponse: Equatable where Document: Equatable {}

/// `POST /{db}/_find` or `POST /{db}/_partition/{partition}/_find` — the documents a Mango
/// query matches, decoded as `Document` (``JSONValue`` for free-form JSON).
///
/// A read-only `POST`, so it is safe to retry. Page with ``FindResponse/bookmark``.
public struct FindOperation<Document: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = FindResponse<Document>

    /// The database.
    public var database: String
    /// The query.
    public var query: MangoQuery
    /// Query only this partition of a partitioned database. Defaults to nil (the whole database).
    public var partition: String?

    private var body: Data?

    public init(database: String, query: MangoQuery, partition: String? = nil) {
        self.database = database
        self.query = query
        self.partition = partition
    }

    /// A query with only a selector (every other option at its default).
    public init(database: String, selector: Selector, partition: String? = nil) {
        self.init(database: database, query: MangoQuery(selector: selector), partition: partition)
    }

    private var request: MangoRequest { MangoRequest(database: database, query: query, partition: partition) }

    public func validate() throws(CouchError) { try request.validate() }
    public mutating func serialise() throws { body = try request.body() }
    public var endpoint: CouchPath { request.path("_find") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}

/// What `_explain` says about how a query would run.
public struct ExplainResponse: Decodable, Sendable, Equatable {
    /// The database.
    public var dbname: String
    /// The index the query would use.
    public var index: MangoIndex
    /// Whether the query is limited to a partition.
    public var partitioned: Bool?
    /// The selector as the server normalised it.
    public var selector: JSONValue
    /// Every query option with the value the server would use.
    public var opts: JSONValue
    /// The limit in force.
    public var limit: Int
    /// The skip in force.
    public var skip: Int
    /// The fields returned: a list, or `"all_fields"`.
    public var fields: JSONValue
    /// The index range the query would read (json indexes, CouchDB 2–3.2).
    public var range: JSONValue?
    /// The view arguments the query would use (CouchDB 3.3+).
    public var mrargs: JSONValue?
    /// Every index considered and why each was or was not chosen (CouchDB 3.4+).
    public var indexCandidates: JSONValue?
    /// Which selector fields an index could cover (CouchDB 3.4+).
    public var selectorHints: JSONValue?
    /// Whether the chosen index covers every requested field (CouchDB 3.4+).
    public var covering: Bool?

    enum CodingKeys: String, CodingKey {
        case dbname, index, partitioned, selector, opts, limit, skip, fields, range, mrargs, covering
        case indexCandidates = "index_candidates"
        case selectorHints = "selector_hints"
    }
}

/// `POST /{db}/_explain` or `POST /{db}/_partition/{partition}/_explain` — how a Mango query
/// would run (which index, which range), without running it.
public struct ExplainOperation: JSONOperation, IdempotentOperation {
    public typealias Response = ExplainResponse

    /// The database.
    public var database: String
    /// The query to explain.
    public var query: MangoQuery
    /// Explain it for this partition of a partitioned database. Defaults to nil.
    public var partition: String?

    private var body: Data?

    public init(database: String, query: MangoQuery, partition: String? = nil) {
        self.database = database
        self.query = query
        self.partition = partition
    }

    private var request: MangoRequest { MangoRequest(database: database, query: query, partition: partition) }

    public func validate() throws(CouchError) { try request.validate() }
    public mutating func serialise() throws { body = try request.body() }
    public var endpoint: CouchPath { request.path("_explain") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}
