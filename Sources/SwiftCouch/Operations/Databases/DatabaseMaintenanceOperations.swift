import Foundation

/// `POST /{db}/_compact` or `POST /{db}/_compact/{ddoc}` — starts compacting a database file, or
/// the view indexes of one design document. Answers 202 at once; the work shows in
/// `_active_tasks`.
///
/// Sent with `Content-Type: application/json` and no body (CouchDB answers 415 without it).
public struct CompactDatabaseOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database.
    public var database: String
    /// Compact this design document's view indexes (with or without `_design/`) instead of the
    /// database file. Defaults to nil (the database).
    public var designDocument: String?

    public init(database: String, designDocument: String? = nil) {
        self.database = database
        self.designDocument = designDocument
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        if let designDocument { try CouchValidation.design(designDocument) }
    }

    public var endpoint: CouchPath {
        guard let designDocument else { return CouchPath(database, "_compact") }
        return CouchPath(database, "_compact", CouchValidation.designName(designDocument))
    }

    public var method: HTTPMethod { .post }
    public var headers: HTTPFields { JSONBody.emptyPostHeaders }
}

/// `POST /{db}/_view_cleanup` — removes view index files no design document uses any more.
public struct ViewCleanupOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database.
    public var database: String

    public init(database: String) { self.database = database }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(database) }
    public var endpoint: CouchPath { CouchPath(database, "_view_cleanup") }
    public var method: HTTPMethod { .post }
    public var headers: HTTPFields { JSONBody.emptyPostHeaders }
}

/// What `_ensure_full_commit` answers.
public struct FullCommitResponse: Codable, Sendable, Equatable {
    public var ok: Bool
    /// When the database was opened (`"0"` on CouchDB 2+).
    public var instanceStartTime: String?

    public init(ok: Bool, instanceStartTime: String? = nil) {
        self.ok = ok
        self.instanceStartTime = instanceStartTime
    }

    enum CodingKeys: String, CodingKey {
        case ok
        case instanceStartTime = "instance_start_time"
    }
}

/// `POST /{db}/_ensure_full_commit` — asks the server to flush writes to disk. CouchDB 2+ always
/// commits at once, so this only matters to old servers and replicators that still call it.
public struct EnsureFullCommitOperation: JSONOperation, IdempotentOperation {
    public typealias Response = FullCommitResponse

    /// The database.
    public var database: String

    public init(database: String) { self.database = database }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(database) }
    public var endpoint: CouchPath { CouchPath(database, "_ensure_full_commit") }
    public var method: HTTPMethod { .post }
    public var headers: HTTPFields { JSONBody.emptyPostHeaders }
}

/// A per-database limit that is read and set as a bare JSON number.
public enum DatabaseLimit: String, Sendable, Hashable, CaseIterable {
    /// `_revs_limit`: how many revisions of each document's history are kept (default 1000).
    case revisions = "_revs_limit"
    /// `_purged_infos_limit`: how many purge records are kept (default 1000).
    case purgedInfos = "_purged_infos_limit"
}

/// `GET /{db}/_revs_limit` or `GET /{db}/_purged_infos_limit` — reads a database limit.
public struct GetDatabaseLimitOperation: JSONOperation {
    public typealias Response = Int

    /// The database.
    public var database: String
    /// Which limit.
    public var limit: DatabaseLimit

    public init(database: String, limit: DatabaseLimit) {
        self.database = database
        self.limit = limit
    }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(database) }
    public var endpoint: CouchPath { CouchPath(database, limit.rawValue) }
}

/// `PUT /{db}/_revs_limit` or `PUT /{db}/_purged_infos_limit` — sets a database limit (the body
/// is a bare JSON number, e.g. `5`).
public struct SetDatabaseLimitOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database.
    public var database: String
    /// Which limit.
    public var limit: DatabaseLimit
    /// The new value (at least 1).
    public var value: Int

    public init(database: String, limit: DatabaseLimit, value: Int) {
        self.database = database
        self.limit = limit
        self.value = value
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.positive(value, "value")
    }

    public var endpoint: CouchPath { CouchPath(database, limit.rawValue) }
    public var method: HTTPMethod { .put }
    public var data: Data? { Data(String(value).utf8) }
}

/// How a database is split into shards: shard range → nodes holding a copy.
public struct DatabaseShards: Codable, Sendable, Equatable {
    /// Each shard's hash range (`00000000-7fffffff`) and the nodes that hold it.
    public var shards: [String: [String]]
}

/// Where one document lives: its shard range and the nodes that hold it.
public struct DocumentShard: Codable, Sendable, Equatable {
    /// The shard's hash range.
    public var range: String
    /// The nodes holding a copy.
    public var nodes: [String]

    public init(range: String, nodes: [String]) {
        self.range = range
        self.nodes = nodes
    }
}

/// `GET /{db}/_shards` — the database's shard ranges and the nodes that hold them.
public struct GetShardsOperation: JSONOperation {
    public typealias Response = DatabaseShards

    /// The database.
    public var database: String

    public init(database: String) { self.database = database }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(database) }
    public var endpoint: CouchPath { CouchPath(database, "_shards") }
}

/// `GET /{db}/_shards/{docid}` — the shard a document id belongs to (the document need not exist).
public struct GetDocumentShardOperation: JSONOperation {
    public typealias Response = DocumentShard

    /// The database.
    public var database: String
    /// The document id.
    public var documentID: String

    public init(database: String, documentID: String) {
        self.database = database
        self.documentID = documentID
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(documentID)
    }

    public var endpoint: CouchPath { CouchPath(database, "_shards", documentID) }
}
