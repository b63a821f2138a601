import Foundation

/// One event in a scheduler job's history.
public struct SchedulerEvent: Decodable, Sendable, Equatable {
    /// When it happened (ISO 8601).
    public var timestamp: String
    /// `added`, `started`, `crashed`, `stopped`, ...
    public var type: String
    /// Why, for crashes.
    public var reason: String?
}

/// A running replication job, as `_scheduler/jobs` lists it.
public struct SchedulerJob: Decodable, Sendable, Equatable {
    /// The replication id.
    public var id: String
    /// The replicator database, for document-backed jobs.
    public var database: String?
    /// The replication document id, for document-backed jobs.
    public var docID: String?
    /// The source, credentials removed.
    public var source: String?
    /// The target, credentials removed.
    public var target: String?
    /// The user that started it.
    public var user: String?
    /// The node that runs it.
    public var node: String?
    /// The Erlang process id.
    public var pid: String?
    /// When it started (ISO 8601).
    public var startTime: String?
    /// Its recent events, newest first.
    public var history: [SchedulerEvent]
    /// Progress figures (`revisions_checked`, `docs_written`, `changes_pending`, ...).
    public var info: JSONValue?

    enum CodingKeys: String, CodingKey {
        case id, database, source, target, user, node, pid, history, info
        case docID = "doc_id"
        case startTime = "start_time"
    }
}

/// What `GET /_scheduler/jobs` answers.
public struct SchedulerJobList: Decodable, Sendable, Equatable {
    public var totalRows: Int
    public var offset: Int?
    public var jobs: [SchedulerJob]

    public init(totalRows: Int, offset: Int?, jobs: [SchedulerJob]) {
        self.totalRows = totalRows
        self.offset = offset
        self.jobs = jobs
    }

    enum CodingKeys: String, CodingKey {
        case jobs, offset
        case totalRows = "total_rows"
    }
}

/// `GET /_scheduler/jobs` — the replication jobs running now (server admins only).
public struct GetSchedulerJobsOperation: JSONOperation {
    public typealias Response = SchedulerJobList

    /// At most this many jobs. Defaults to nil (all).
    public var limit: Int?
    /// Skip this many first. Defaults to nil.
    public var skip: Int?

    public init(limit: Int? = nil, skip: Int? = nil) {
        self.limit = limit
        self.skip = skip
    }

    public func validate() throws(CouchError) {
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
    }

    public var endpoint: CouchPath { CouchPath("_scheduler", "jobs") }

    public var parameters: [URLQueryItem] {
        var items = QueryParameters()
        items.add("limit", limit)
        items.add("skip", skip)
        return items.queryItems
    }
}

/// The state of a `_replicator` document, as `_scheduler/docs` reports it.
public struct SchedulerDocument: Decodable, Sendable, Equatable {
    /// The replicator database.
    public var database: String
    /// The document id.
    public var docID: String
    /// The replication id (nil until the scheduler has parsed the document).
    public var id: String?
    /// `initializing`, `running`, `pending`, `crashing`, `error`, `completed` or `failed`.
    public var state: String
    /// Progress figures, or the error for `crashing`/`failed` (free-form).
    public var info: JSONValue?
    /// Consecutive errors.
    public var errorCount: Int?
    /// The node that runs it.
    public var node: String?
    /// The source, credentials removed.
    public var source: String?
    /// The target, credentials removed.
    public var target: String?
    /// When it started (ISO 8601).
    public var startTime: String?
    /// When its state last changed (ISO 8601).
    public var lastUpdated: String?

    enum CodingKeys: String, CodingKey {
        case database, id, state, info, node, source, target
        case docID = "doc_id"
        case errorCount = "error_count"
        case startTime = "start_time"
        case lastUpdated = "last_updated"
    }
}

/// What `GET /_scheduler/docs` answers.
public struct SchedulerDocumentList: Decodable, Sendable, Equatable {
    public var totalRows: Int
    public var offset: Int?
    public var docs: [SchedulerDocument]

    enum CodingKeys: String, CodingKey {
        case docs, offset
        case totalRows = "total_rows"
    }
}

/// `GET /_scheduler/docs` or `GET /_scheduler/docs/{replicator_db}` — the state of replication
/// documents (server admins only).
public struct GetSchedulerDocumentsOperation: JSONOperation {
    public typealias Response = SchedulerDocumentList

    /// Only documents of this replicator database (`_replicator` or `{prefix}/_replicator`).
    /// Defaults to nil (all).
    public var database: String?
    /// At most this many documents. Defaults to nil (all).
    public var limit: Int?
    /// Skip this many first. Defaults to nil.
    public var skip: Int?

    public init(database: String? = nil, limit: Int? = nil, skip: Int? = nil) {
        self.database = database
        self.limit = limit
        self.skip = skip
    }

    public func validate() throws(CouchError) {
        if let database { try CouchValidation.validateDatabaseName(database) }
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
    }

    public var endpoint: CouchPath {
        CouchPath(segments: ["_scheduler", "docs"] + (database.map { [$0] } ?? []))
    }

    public var parameters: [URLQueryItem] {
        var items = QueryParameters()
        items.add("limit", limit)
        items.add("skip", skip)
        return items.queryItems
    }
}

/// `GET /_scheduler/docs/{replicator_db}/{docid}` — the state of one replication document.
public struct GetSchedulerDocumentOperation: JSONOperation {
    public typealias Response = SchedulerDocument

    /// The document id.
    public var id: String
    /// The replicator database. Defaults to `_replicator`.
    public var database: String

    public init(id: String, database: String = "_replicator") {
        self.id = id
        self.database = database
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
    }

    public var endpoint: CouchPath { CouchPath("_scheduler", "docs", database, id) }
}
