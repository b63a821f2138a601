import Foundation

/// What `POST /_replicate` answers.
public struct ReplicationResult: Decodable, Sendable, Equatable {
    public var ok: Bool
    /// The id of this replication session (one-shot).
    public var sessionID: String?
    /// The source's sequence when the replication finished (one-shot).
    public var sourceLastSeq: CouchSequence?
    /// The replication id's format version.
    public var replicationIDVersion: Int?
    /// Every session of this replication, newest first (one-shot).
    public var history: [ReplicationHistory]?
    /// Documents read in this session (CouchDB answers it for `doc_ids` replications).
    public var docsRead: Int?
    /// Documents written in this session.
    public var docsWritten: Int?
    /// Documents that failed to write.
    public var docWriteFailures: Int?
    /// True when there was nothing to replicate.
    public var noChanges: Bool?
    /// The replication id, for a continuous replication (pass it to cancel).
    public var localID: String?

    enum CodingKeys: String, CodingKey {
        case ok, history
        case sessionID = "session_id"
        case sourceLastSeq = "source_last_seq"
        case replicationIDVersion = "replication_id_version"
        case docsRead = "docs_read"
        case docsWritten = "docs_written"
        case docWriteFailures = "doc_write_failures"
        case noChanges = "no_changes"
        case localID = "_local_id"
    }
}

/// `POST /_replicate` — runs a replication: one-shot (answers when done) or continuous (answers
/// at once with its id), or cancels a running one.
///
/// Not kept across restarts: use ``PutReplicationDocumentOperation`` for a replication the server
/// keeps. A missing target answers 500 `db_not_found` (set ``ReplicationSettings/createTarget``).
public struct ReplicateOperation: JSONOperation, CustomStringConvertible {
    public typealias Response = ReplicationResult

    /// What to replicate.
    public var settings: ReplicationSettings
    /// Cancel the running replication with these settings (or ``replicationID``) instead of
    /// starting one. Defaults to false.
    public var cancel: Bool
    /// With ``cancel``: the id of the replication to cancel (`_local_id` of a continuous one).
    /// Defaults to nil.
    public var replicationID: String?

    private var body: Data?

    public init(settings: ReplicationSettings, cancel: Bool = false, replicationID: String? = nil) {
        self.settings = settings
        self.cancel = cancel
        self.replicationID = replicationID
    }

    /// A replication from `source` to `target` with the other settings at their defaults.
    public init(source: ReplicationEndpoint, target: ReplicationEndpoint, continuous: Bool? = nil) {
        self.init(settings: ReplicationSettings(source: source, target: target, continuous: continuous))
    }

    private struct Body: Encodable {
        var settings: ReplicationSettings
        var cancel: Bool
        var replicationID: String?

        enum CodingKeys: String, CodingKey { case cancel, id }

        func encode(to encoder: any Encoder) throws {
            try settings.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            if cancel { try container.encode(true, forKey: .cancel) }
            try container.encodeIfPresent(replicationID, forKey: .id)
        }
    }

    public func validate() throws(CouchError) {
        try settings.validate()
        if replicationID != nil, !cancel { throw CouchError.validation("replicationID is only used with cancel.") }
    }

    public mutating func serialise() throws {
        body = try JSONBody.encode(Body(settings: settings, cancel: cancel, replicationID: replicationID))
    }

    public var endpoint: CouchPath { CouchPath("_replicate") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }

    public var description: String {
        "ReplicateOperation(\(settings.source) → \(settings.target)\(cancel ? ", cancel" : ""))"
    }
}

/// A replication kept in the `_replicator` database: the server starts it, restarts it after
/// failures and reports its state in `_scheduler/docs`.
public struct ReplicationDocument: Codable, Sendable, Equatable {
    /// The document id.
    public var id: String
    /// The document revision, when read from the server.
    public var revision: String?
    /// What to replicate.
    public var settings: ReplicationSettings
    /// `completed` or `failed`, written by the server for one-shot replications (read-only).
    public var state: String?
    /// When ``state`` was written (read-only).
    public var stateTime: String?
    /// Why it failed, with ``state`` `failed` (read-only).
    public var stateReason: String?
    /// Figures of a completed replication (read-only).
    public var stats: JSONValue?

    public init(id: String, settings: ReplicationSettings) {
        self.id = id
        self.settings = settings
    }

    enum CodingKeys: String, CodingKey {
        case id = "_id"
        case revision = "_rev"
        case state = "_replication_state"
        case stateTime = "_replication_state_time"
        case stateReason = "_replication_state_reason"
        case stats = "_replication_stats"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        revision = try container.decodeIfPresent(String.self, forKey: .revision)
        state = try container.decodeIfPresent(String.self, forKey: .state)
        stateTime = try container.decodeIfPresent(String.self, forKey: .stateTime)
        stateReason = try container.decodeIfPresent(String.self, forKey: .stateReason)
        stats = try container.decodeIfPresent(JSONValue.self, forKey: .stats)
        settings = try ReplicationSettings(from: decoder)
    }

    /// Encodes the settings with `_id` and `_rev`; the server-written `_replication_*` members
    /// are not sent (the server refuses writes of them).
    public func encode(to encoder: any Encoder) throws {
        try settings.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encodeIfPresent(revision, forKey: .revision)
    }
}

/// `PUT /_replicator/{docid}` — creates (or, with a revision, replaces) a replication document.
public struct PutReplicationDocumentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The replication.
    public var document: ReplicationDocument
    /// The replicator database. Defaults to `_replicator`.
    public var database: String

    private var body: Data?

    public init(document: ReplicationDocument, database: String = "_replicator") {
        self.document = document
        self.database = database
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(document.id)
        if let revision = document.revision { try CouchValidation.validateRevision(revision) }
        try document.settings.validate()
    }

    public mutating func serialise() throws { body = try JSONBody.encode(document) }

    public var endpoint: CouchPath { .document(database, document.id) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
    public var isIdempotent: Bool? { document.revision != nil }
}

/// `GET /_replicator/{docid}` — reads a replication document.
public struct GetReplicationDocumentOperation: JSONOperation {
    public typealias Response = ReplicationDocument

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

    public var endpoint: CouchPath { .document(database, id) }
}

/// `DELETE /_replicator/{docid}?rev=` — deletes a replication document, which stops the
/// replication.
public struct DeleteReplicationDocumentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The document id.
    public var id: String
    /// The document's current revision.
    public var revision: String
    /// The replicator database. Defaults to `_replicator`.
    public var database: String

    public init(id: String, revision: String, database: String = "_replicator") {
        self.id = id
        self.revision = revision
        self.database = database
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        try CouchValidation.validateRevision(revision)
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .delete }
    public var parameters: [URLQueryItem] { [URLQueryItem(name: "rev", value: revision)] }
}
