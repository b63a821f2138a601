import Foundation

/// Document ids with revisions of each: the request body of `_revs_diff`, `_missing_revs` and
/// `_purge`, e.g. `["doc1": ["2-abc", "3-def"]]`.
public typealias RevisionsByDocument = [String: [String]]

/// What `_revs_diff` says about one document.
public struct RevisionDifference: Codable, Sendable, Equatable {
    /// The revisions asked about that the database does not have.
    public var missing: [String]
    /// Revisions the database has that may be ancestors of the missing ones.
    public var possibleAncestors: [String]?

    public init(missing: [String], possibleAncestors: [String]? = nil) {
        self.missing = missing
        self.possibleAncestors = possibleAncestors
    }

    enum CodingKeys: String, CodingKey {
        case missing
        case possibleAncestors = "possible_ancestors"
    }
}

/// A read-only `POST` whose body is a ``RevisionsByDocument`` map.
private struct RevisionQuery {
    var database: String
    var revisions: RevisionsByDocument

    func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try OptionCheck.revisionMap(revisions, "revisions")
    }

    func body() throws -> Data { try JSONBody.encode(revisions) }
}

/// `POST /{db}/_revs_diff` — which of these revisions the database is missing (documents with
/// nothing missing are left out of the answer). The replicator's first question.
public struct RevsDiffOperation: JSONOperation {
    public typealias Response = [String: RevisionDifference]

    /// The database.
    public var database: String
    /// The revisions to ask about, by document id.
    public var revisions: RevisionsByDocument

    private var body: Data?

    public init(database: String, revisions: RevisionsByDocument) {
        self.database = database
        self.revisions = revisions
    }

    public func validate() throws(CouchError) {
        try RevisionQuery(database: database, revisions: revisions).validate()
    }

    public mutating func serialise() throws {
        body = try RevisionQuery(database: database, revisions: revisions).body()
    }

    public var endpoint: CouchPath { CouchPath(database, "_revs_diff") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var isIdempotent: Bool? { true }
}

/// What `_missing_revs` answers.
public struct MissingRevisions: Codable, Sendable, Equatable {
    /// The revisions the database does not have, by document id.
    public var missingRevs: RevisionsByDocument

    enum CodingKeys: String, CodingKey {
        case missingRevs = "missing_revs"
    }
}

/// `POST /{db}/_missing_revs` — the revisions the database does not have, without ancestors
/// (an older form of `_revs_diff`).
public struct MissingRevsOperation: JSONOperation {
    public typealias Response = MissingRevisions

    /// The database.
    public var database: String
    /// The revisions to ask about, by document id.
    public var revisions: RevisionsByDocument

    private var body: Data?

    public init(database: String, revisions: RevisionsByDocument) {
        self.database = database
        self.revisions = revisions
    }

    public func validate() throws(CouchError) {
        try RevisionQuery(database: database, revisions: revisions).validate()
    }

    public mutating func serialise() throws {
        body = try RevisionQuery(database: database, revisions: revisions).body()
    }

    public var endpoint: CouchPath { CouchPath(database, "_missing_revs") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var isIdempotent: Bool? { true }
}

/// What `_purge` answers.
public struct PurgeResponse: Decodable, Sendable, Equatable {
    /// The purge sequence after the purge (CouchDB 3 sends `null`).
    public var purgeSeq: CouchSequence?
    /// The revisions actually purged, by document id.
    public var purged: RevisionsByDocument

    enum CodingKeys: String, CodingKey {
        case purged
        case purgeSeq = "purge_seq"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purged = try container.decode(RevisionsByDocument.self, forKey: .purged)
        let seq = try container.decodeIfPresent(JSONValue.self, forKey: .purgeSeq)
        purgeSeq = seq.flatMap { $0 == .null ? nil : CouchSequence(json: $0) }
    }
}

/// `POST /{db}/_purge` — removes document revisions for good, as if they had never been written
/// (no tombstone; they do not replicate). Server or database admins only.
public struct PurgeOperation: JSONOperation {
    public typealias Response = PurgeResponse

    /// The database.
    public var database: String
    /// The leaf revisions to purge, by document id.
    public var revisions: RevisionsByDocument

    private var body: Data?

    public init(database: String, revisions: RevisionsByDocument) {
        self.database = database
        self.revisions = revisions
    }

    public func validate() throws(CouchError) {
        try RevisionQuery(database: database, revisions: revisions).validate()
    }

    public mutating func serialise() throws {
        body = try RevisionQuery(database: database, revisions: revisions).body()
    }

    public var endpoint: CouchPath { CouchPath(database, "_purge") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var isIdempotent: Bool? { true }
}
