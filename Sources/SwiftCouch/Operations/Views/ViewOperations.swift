import Foundation

/// `GET /{db}/_design/{ddoc}/_view/{view}` — queries a view (map, or map/reduce).
///
/// Rows are typed: `QueryViewOperation<String, Int, Recipe>` reads string keys, integer values
/// and, with `includeDocs`, `Recipe` documents; use ``JSONValue`` for anything free-form. With
/// `keys` the query is sent as `POST` with `{"keys": [...]}` (safe to retry). Set `partition`
/// to query a partitioned view: `/{db}/_partition/{partition}/_design/{ddoc}/_view/{view}`.
public struct QueryViewOperation<Key: Decodable & Sendable, Value: Decodable & Sendable, Doc: Decodable & Sendable>:
    JSONOperation, IdempotentOperation
{
    public typealias Response = ViewResponse<ViewRow<Key, Value, Doc>>

    /// The database name.
    public var database: String
    /// The design document's name, without `_design/` (a leading `_design/` is accepted).
    public var design: String
    /// The view's name.
    public var view: String
    /// The partition to query, for a partitioned view. Defaults to nil.
    public var partition: String?
    /// The query options. Defaults to none.
    public var options: ViewQueryOptions

    private var body: Data?

    public init(
        database: String, design: String, view: String, partition: String? = nil, options: ViewQueryOptions = .init()
    ) {
        self.database = database
        self.design = design
        self.view = view
        self.partition = partition
        self.options = options
    }

    public func validate() throws(CouchError) {
        try ViewPath.validate(database: database, design: design, view: view, partition: partition)
        try options.validate()
    }

    public mutating func serialise() throws { body = try RowQueryRequest.body(keys: options.keys) }

    public var endpoint: CouchPath { ViewPath.path(database, design, "_view", view, partition: partition) }
    public var method: HTTPMethod { body == nil ? .get : .post }
    public var data: Data? { body }
    public var parameters: [URLQueryItem] { options.parameters(includingKeys: false).queryItems }
}

/// A view read as free-form JSON rows.
public typealias QueryJSONViewOperation = QueryViewOperation<JSONValue, JSONValue, JSONValue>

/// `POST /{db}/_design/{ddoc}/_view/{view}/queries` — several queries of one view in one
/// request; one result per query, in order.
public struct QueryViewQueriesOperation<
    Key: Decodable & Sendable, Value: Decodable & Sendable, Doc: Decodable & Sendable
>: JSONOperation, IdempotentOperation {
    public typealias Response = ViewQueriesResponse<ViewRow<Key, Value, Doc>>

    /// The database name.
    public var database: String
    /// The design document's name, without `_design/`.
    public var design: String
    /// The view's name.
    public var view: String
    /// The queries, each with its own options (`keys` included).
    public var queries: [ViewQueryOptions]

    private var body: Data?

    public init(database: String, design: String, view: String, queries: [ViewQueryOptions]) {
        self.database = database
        self.design = design
        self.view = view
        self.queries = queries
    }

    public func validate() throws(CouchError) {
        try ViewPath.validate(database: database, design: design, view: view, partition: nil)
        try RowQueryRequest.validate(queries: queries.count)
        for query in queries { try query.validate() }
    }

    public mutating func serialise() throws {
        body = try RowQueryRequest.body(queries: queries.map { $0.parameters(includingKeys: true) })
    }

    public var endpoint: CouchPath {
        ViewPath.path(database, design, "_view", view, partition: nil).appending("queries")
    }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}

/// Paths under a design document: `/{db}[/_partition/{p}]/_design/{ddoc}/{kind}/{name...}`.
enum ViewPath {
    static func path(_ database: String, _ design: String, _ rest: String..., partition: String?) -> CouchPath {
        var segments = [database]
        if let partition { segments += ["_partition", partition] }
        segments += ["_design", CouchValidation.designName(design)] + rest
        return CouchPath(segments: segments)
    }

    static func validate(database: String, design: String, view: String, partition: String?) throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.design(design)
        try CouchValidation.notEmpty(view, "View name")
        try CouchValidation.partition(partition)
    }
}
