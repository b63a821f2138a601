import Foundation
import SwiftCouch

/// Which documents a replication copies.
public enum ReplicationFilter: Sendable {
    /// Only these document ids (`_doc_ids`; `_design/` ids included).
    case documentIDs([String])
    /// Only documents matching a Mango selector (`_selector`).
    case selector(Selector)
    /// A filter function of a design document of the source (`filter=ddoc/name`), with the query
    /// parameters it reads from `req.query`.
    case designFilter(designDocument: String, name: String, parameters: [String: String] = [:])
    /// Only documents a view's map function emits for (`filter=_view`).
    case view(designDocument: String, view: String)
    /// A Swift closure deciding on each fetched revision (the whole document, `_id`, `_rev`,
    /// `_deleted` included). `version` enters the replication id: change it whenever the
    /// closure's logic changes, so that the replication starts over instead of resuming from a
    /// checkpoint made under other rules.
    case closure(version: String, @Sendable (JSONValue) -> Bool)

    /// The `_changes` filter sent to the source (nil for a closure filter, applied after fetching).
    var changesFilter: ChangesFilter? {
        switch self {
        case .documentIDs(let ids): return .documentIDs(ids)
        case .selector(let selector): return .selector(selector)
        case .designFilter(let ddoc, let name, let parameters):
            return .custom(
                designDocument: ddoc, name: name,
                parameters: parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) })
        case .view(let ddoc, let view): return .view(designDocument: ddoc, view: view)
        case .closure: return nil
        }
    }

    /// What the filter contributes to the replication id: its kind and parameters, a selector as
    /// canonical JSON (sorted keys), the ids sorted, a closure's version.
    var identity: String {
        switch self {
        case .documentIDs(let ids):
            return "doc_ids:" + ReplicationID.canonical(.array(ids.sorted().map(JSONValue.string)))
        case .selector(let selector):
            return "selector:" + ReplicationID.canonical(selector.json)
        case .designFilter(let ddoc, let name, let parameters):
            let params = JSONValue.object(parameters.mapValues(JSONValue.string))
            return "filter:" + ddoc + "/" + name + ":" + ReplicationID.canonical(params)
        case .view(let ddoc, let view):
            return "view:" + ddoc + "/" + view
        case .closure(let version, _):
            return "closure:" + version
        }
    }
}

/// Which way documents flow, seen from the app: into the local side (`pull`) or out of it (`push`).
public enum ReplicationDirection: String, Sendable, Hashable {
    /// From the remote side to this device (or from source to target when both are remote).
    case pull
    /// From this device to the remote side.
    case push
}

/// What a conflict resolver is given after each pulled batch: the database the batch was written
/// to and the ids of that batch's documents that have conflicts there now.
public struct ConflictBatch: Sendable {
    /// The database the batch was written to (the replication's target).
    public var database: any DocumentStore
    /// The ids of the batch's documents with more than one live leaf, sorted.
    public var conflictedIDs: [String]
}

/// How a ``Replicator`` runs. Every field has a default.
public struct ReplicationOptions: Sendable {
    /// Follow the source's changes after catching up, until stopped. Defaults to false (one-shot).
    public var continuous: Bool
    /// Create the target database when it does not exist. Defaults to false: a missing target is
    /// an error.
    public var createTarget: Bool
    /// Which documents to copy. Defaults to nil (all). Enters the replication id.
    public var filter: ReplicationFilter?
    /// Copy only each document's winning revision (`winning_revs_only`): no conflicts reach the
    /// target. Defaults to false. Enters the replication id.
    public var winningRevisionsOnly: Bool
    /// Where to start when there is no checkpoint (a checkpoint always wins). Defaults to nil
    /// (from the start of the source's history).
    public var since: CouchSequence?
    /// Changes read at a time, each batch diffed, fetched and written on its own. Defaults to 500.
    public var batchSize: Int
    /// Batches fetched and written at once. Defaults to 4.
    public var workers: Int
    /// How often a checkpoint is written while work goes on (and always at the end). Defaults to 5 s.
    public var checkpointInterval: TimeInterval
    /// Continuous mode: how long one long-poll of the changes feed waits for a change, in seconds:
    /// the server answers by then (empty when nothing came) and the next long-poll starts, so a
    /// silent connection is noticed within `feedTimeout` + 15 s (the request's deadline) and
    /// reopened. Defaults to 30.
    public var feedTimeout: TimeInterval
    /// Continuous mode: the backoff after a lost connection, a 429 or a 5xx.
    public var backoff: ReplicationBackoff
    /// The direction reported in events. Defaults to nil: `push` when only the source is local,
    /// `pull` otherwise.
    public var direction: ReplicationDirection?
    /// Called after each batch is written, with the ids of the batch's documents that now have
    /// conflicts on the target (not called when there are none). Resolve them with the database's
    /// `resolveConflicts`; an error thrown is reported as a `resolverFailed` event and the
    /// replication goes on. Defaults to nil: CouchDB's deterministic winner stands and nothing is
    /// discarded.
    public var conflictResolver: (@Sendable (ConflictBatch) async throws -> Void)?

    public init(
        continuous: Bool = false, createTarget: Bool = false, filter: ReplicationFilter? = nil,
        winningRevisionsOnly: Bool = false, since: CouchSequence? = nil, batchSize: Int = 500, workers: Int = 4,
        checkpointInterval: TimeInterval = 5, feedTimeout: TimeInterval = 30,
        backoff: ReplicationBackoff = ReplicationBackoff(), direction: ReplicationDirection? = nil,
        conflictResolver: (@Sendable (ConflictBatch) async throws -> Void)? = nil
    ) {
        self.continuous = continuous
        self.createTarget = createTarget
        self.filter = filter
        self.winningRevisionsOnly = winningRevisionsOnly
        self.since = since
        self.batchSize = batchSize
        self.workers = workers
        self.checkpointInterval = checkpointInterval
        self.feedTimeout = feedTimeout
        self.backoff = backoff
        self.direction = direction
        self.conflictResolver = conflictResolver
    }

    func validate() throws(CouchError) {
        guard batchSize >= 1, batchSize <= 10_000 else {
            throw CouchError.validation("batchSize must be between 1 and 10,000, not \(batchSize).")
        }
        guard workers >= 1, workers <= 64 else {
            throw CouchError.validation("workers must be between 1 and 64, not \(workers).")
        }
        guard checkpointInterval >= 0, feedTimeout > 0, feedTimeout < 3600 else {
            throw CouchError.validation("checkpointInterval must be positive and feedTimeout between 0 and 3600 s.")
        }
        try filter?.changesFilter?.validateForReplication()
        if case .closure(let version, _) = filter, version.isEmpty {
            throw CouchError.validation("A closure filter needs a non-empty version string.")
        }
    }
}

extension ChangesFilter {
    /// Validates through a `_changes` operation, so the rules are the operation's own.
    func validateForReplication() throws(CouchError) {
        try ChangesOperation<JSONValue>(database: "validation", filter: self).validate()
    }
}
