import Foundation

/// `PUT /{db}` — creates a database.
///
/// Fails with 412 `file_exists` when it exists already; the name is checked against CouchDB's
/// rule in `validate` first.
public struct CreateDatabaseOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database name.
    public var name: String
    /// Create a partitioned database. Defaults to nil (the server's default: not partitioned).
    public var partitioned: Bool?
    /// Number of shards (`q`). Defaults to nil (the server's default).
    public var shards: Int?
    /// Number of replicas (`n`). Defaults to nil (the server's default).
    public var replicas: Int?

    public init(name: String, partitioned: Bool? = nil, shards: Int? = nil, replicas: Int? = nil) {
        self.name = name
        self.partitioned = partitioned
        self.shards = shards
        self.replicas = replicas
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(name)
        if let shards, shards < 1 { throw CouchError.validation("shards (q) must be at least 1 (got \(shards)).") }
        if let replicas, replicas < 1 {
            throw CouchError.validation("replicas (n) must be at least 1 (got \(replicas)).")
        }
    }

    public var endpoint: CouchPath { CouchPath(name) }
    public var method: HTTPMethod { .put }

    public var parameters: [URLQueryItem] {
        var items: [URLQueryItem] = []
        if let partitioned { items.append(URLQueryItem(name: "partitioned", value: String(partitioned))) }
        if let shards { items.append(URLQueryItem(name: "q", value: String(shards))) }
        if let replicas { items.append(URLQueryItem(name: "n", value: String(replicas))) }
        return items
    }
}

/// `DELETE /{db}` — deletes a database and everything in it.
public struct DeleteDatabaseOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database name.
    public var name: String

    public init(name: String) { self.name = name }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(name) }
    public var endpoint: CouchPath { CouchPath(name) }
    public var method: HTTPMethod { .delete }
}

/// What `GET /{db}` says about a database.
public struct DatabaseInfo: Codable, Sendable, Equatable {
    /// Sizes in bytes.
    public struct Sizes: Codable, Sendable, Equatable {
        public var file: Int?
        public var external: Int?
        public var active: Int?
    }
    /// Database properties.
    public struct Properties: Codable, Sendable, Equatable {
        public var partitioned: Bool?
    }
    /// How the database is clustered.
    public struct Cluster: Codable, Sendable, Equatable {
        public var q: Int?
        public var n: Int?
        public var w: Int?
        public var r: Int?
    }

    public var dbName: String
    /// The number of live documents.
    public var docCount: Int
    /// The number of deleted documents.
    public var docDelCount: Int
    /// The opaque update sequence (a string on CouchDB 2+, a number on 1.x).
    public var updateSeq: JSONValue
    public var purgeSeq: JSONValue?
    public var compactRunning: Bool?
    public var sizes: Sizes?
    public var props: Properties?
    public var cluster: Cluster?
    public var instanceStartTime: String?
    /// The on-disk format version (CouchDB 2.3+).
    public var diskFormatVersion: Int?

    enum CodingKeys: String, CodingKey {
        case sizes, props, cluster
        case diskFormatVersion = "disk_format_version"
        case dbName = "db_name"
        case docCount = "doc_count"
        case docDelCount = "doc_del_count"
        case updateSeq = "update_seq"
        case purgeSeq = "purge_seq"
        case compactRunning = "compact_running"
        case instanceStartTime = "instance_start_time"
    }
}

/// `GET /{db}` — a database's document counts, sizes and update sequence.
public struct GetDatabaseInfoOperation: JSONOperation {
    public typealias Response = DatabaseInfo

    /// The database name.
    public var name: String

    public init(name: String) { self.name = name }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(name) }
    public var endpoint: CouchPath { CouchPath(name) }
}

/// `HEAD /{db}` — whether a database exists.
///
/// Answers `true` for 200 and `false` for 404 (a missing database is an answer here, not an
/// error); any other status (401, 403, 5xx) is a ``CouchError``.
public struct DatabaseExistsOperation: CouchOperation {
    public typealias Response = Bool

    /// The database name.
    public var name: String

    public init(name: String) { self.name = name }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(name) }
    public var endpoint: CouchPath { CouchPath(name) }
    public var method: HTTPMethod { .head }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> Bool {
        if httpInfo.statusCode == 404 { return false }
        try throwIfError(data: data, httpInfo: httpInfo)
        return true
    }
}
