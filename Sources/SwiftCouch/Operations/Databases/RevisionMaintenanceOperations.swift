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

/// What `_missing_revs` answers.
public struct MissingRevisions: Codable, Sendable, Equatable {
    /// The revisions the database does not have, by document id.
    public var missingRevs: RevisionsByDocument

    enum CodingKeys: String, CodingKey {
        case missingRevs = "missing_revs"
    }
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

/// An endpoint that takes a ``RevisionsByDocument`` map as its body: `_revs_diff`,
/// `_missing_revs` or `_purge`. Used as the parameter of ``RevisionMapOperation``.
public protocol RevisionMapEndpoint: Sendable {
    /// What the endpoint answers.
    associatedtype Answer: Decodable & Sendable
    /// The path segment after the database, e.g. `_revs_diff`.
    static var pathSegment: String { get }
}

/// `_revs_diff`: which revisions the database is missing, with possible ancestors.
public enum RevsDiffEndpoint: RevisionMapEndpoint {
    public typealias Answer = [String: RevisionDifference]
    public static let pathSegment = "_revs_diff"
}

/// `_missing_revs`: which revisions the database is missing.
public enum MissingRevsEndpoint: RevisionMapEndpoint {
    public typealias Answer = MissingRevisions
    public static let pathSegment = "_missing_revs"
}

/// `_purge`: remove revisions for good.
public enum PurgeEndpoint: RevisionMapEndpoint {
    public typealias Answer = PurgeResponse
    public static let pathSegment = "_purge"
}

/// `POST /{db}/{_revs_diff|_missing_revs|_purge}` with a `{docid: [rev]}` body. Use it through
/// ``RevsDiffOperation``, ``MissingRevsOperation`` and ``PurgeOperation``.
///
/// All three are safe to repeat (the two questions read only; purging revisions that are gone
/// already does nothing), so 5xx answers may be retried.
public struct RevisionMapOperation<Endpoint: RevisionMapEndpoint>: JSONOperation, IdempotentOperation {
    public typealias Response = Endpoint.Answer

    /// The database.
    public var database: String
    /// The revisions, by document id.
    public var revisions: RevisionsByDocument

    private var body: Data?

    public init(database: String, revisions: RevisionsByDocument) {
        self.database = database
        self.revisions = revisions
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.revisionMap(revisions, "revisions")
    }

    public mutating func serialise() throws { body = try JSONBody.encode(revisions) }

    public var endpoint: CouchPath { CouchPath(database, Endpoint.pathSegment) }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}

/// `POST /{db}/_revs_diff` — which of these revisions the database is missing (documents with
/// nothing missing are left out of the answer). The replicator's first question.
public typealias RevsDiffOperation = RevisionMapOperation<RevsDiffEndpoint>

/// `POST /{db}/_missing_revs` — the revisions the database does not have, without ancestors
/// (an older form of `_revs_diff`).
public typealias MissingRevsOperation = RevisionMapOperation<MissingRevsEndpoint>

/// `POST /{db}/_purge` — removes document revisions for good, as if they had never been written
/// (no tombstone; they do not replicate). Server or database admins only.
public typealias PurgeOperation = RevisionMapOperation<PurgeEndpoint>
