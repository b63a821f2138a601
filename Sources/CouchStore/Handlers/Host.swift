import CouchQuery
import Foundation

/// A database of an engine, as a server around the engine (an ``EngineHost``) holds it: opaque, with what a host may
/// ask of it.
package struct DatabaseHandle: Sendable {
    let database: Database

    init(_ database: Database) { self.database = database }

    /// The database's name.
    package var name: String { database.name }
    /// How many copies of each shard the database has (its `n`).
    package var copies: Int { database.n }
    /// The shard holding the document `id` (0 ..< q).
    package func shard(of id: String) -> Int { database.withLock { database.shard(of: id) } }
    /// Whether the database has been deleted since the handle was taken.
    package var isDeleted: Bool { database.withLock { database.isDeleted } }
    /// The database's update sequence (the number of document writes so far).
    package var updateSequence: Int { database.withLock { database.updateSeq } }

    /// The body of a document's winning revision (without `_id`, `_rev` or attachments), or nil when the document
    /// does not exist or is deleted.
    package func winningBody(_ id: String) -> JSON? {
        database.withLock {
            guard let winner = database.docs[id]?.winner, !winner.deleted else { return nil }
            return winner.body ?? [:]
        }
    }

    /// Writes a new revision of a live document whose body is `change` applied to the winning revision's body,
    /// keeping its attachments (no `validate_doc_update`, no access checks: the host's own bookkeeping). Does
    /// nothing when the document does not exist or is deleted.
    package func amendWinningDocument(_ id: String, _ change: (JSON) -> JSON) throws(EngineError) {
        try database.withLock { () throws(EngineError) in
            guard let winner = database.docs[id]?.winner, !winner.deleted else { return }
            try database.updateInteractive(
                id: id, baseRev: winner.rev, deleted: false, body: change(winner.body ?? [:]),
                attachments: winner.atts.map { .keep($0) })
        }
    }

    /// The ids of the documents, in `_all_docs` order.
    package var documentIDs: [String] { database.withLock { database.sortedIDs } }

    /// Waits until the database has a write after `sequence`, is deleted, or `deadline` passes. Returns whether the
    /// database is still there.
    package func waitForUpdate(after sequence: Int, until deadline: Date, unless stop: () -> Bool) -> Bool {
        database.withLock {
            while database.updateSeq == sequence, !database.isDeleted, !stop(), Date() < deadline {
                _ = database.cond.wait(until: deadline)
            }
            return !database.isDeleted
        }
    }
}

/// What a server built around the engine adds to it (the TestServer: cluster mode, `_db_updates`, the `_users` and
/// `_replicator` machinery). The engine calls these at the points named; an engine with no host is a single node that
/// acknowledges every write with 201, places new databases with `q` 2 and `n` 1, and reads the database itself.
package protocol EngineHost: AnyObject, Sendable {
    /// Shards (`q`) and copies (`n`) of a new database when the request names none, and the most copies there can be.
    func placementDefaults() -> (q: Int, n: Int, maxCopies: Int)
    /// The nodes holding the copies of shard `shard` of a database of `copies` copies (`/db/_shards`).
    func nodes(ofShard shard: Int, copies: Int) -> [String]
    /// Before a document write, nothing written yet: throws when the documents `ids` cannot be written.
    func willWrite(_ db: DatabaseHandle, ids: [String]) throws(EngineError)
    /// The status of a committed write of `ids`: 201, or 202 Accepted when it is not durable yet.
    func writeStatus(_ db: DatabaseHandle, ids: [String], request: ServerRequest) throws(EngineError) -> Int
    /// The copy of `db` a read CouchDB serves from one copy of each shard sees (`_all_docs`, views, a normal
    /// `_changes` feed, `r=1` document reads, ...).
    func readCopy(of db: DatabaseHandle) -> DatabaseHandle
    /// The server's own rules for a document write (`_users` documents), after the engine's checks and
    /// `validate_doc_update`, before it is stored: may change the body, or refuse the write.
    func beforeDocumentUpdate(
        _ db: DatabaseHandle, id: String, deleted: Bool, body: inout JSON, user: UserContext)
        throws(EngineError)
    /// Whether the host enforces this design document's `validate_doc_update` itself (the engine then skips it).
    func enforcesValidation(ofDesignDocument id: String, in database: String) -> Bool
    /// A database was created.
    func databaseCreated(_ db: DatabaseHandle)
    /// A database was deleted.
    func databaseDeleted(_ name: String)
    /// A document write was committed (database lock held: must not block or call the engine).
    func documentCommitted(_ db: DatabaseHandle, id: String)
}

/// A copy of a database that applies its source's changes only once they are old enough: a shard copy that has not
/// caught up (the TestServer's replica lag). Writes never reach it; design documents are always current (CouchDB
/// reads them with a quorum).
package final class LaggingCopy: @unchecked Sendable {
    // Safe: immutable; both databases are only touched under their locks.
    private let source: Database
    private let copy: Database

    /// Starts a copy of `db` as it is now; every later change is queued for it.
    package init(of db: DatabaseHandle) {
        let source = db.database
        self.source = source
        copy = source.withLock { source.startReplica() }
    }

    /// Stops queueing `db`'s changes for a copy.
    package static func stop(_ db: DatabaseHandle) {
        db.database.withLock { db.database.stopReplica() }
    }

    /// The copy after applying every queued change made at or before `cutoff`.
    package func caughtUp(until cutoff: Date) -> DatabaseHandle {
        source.withLock {
            copy.withLock {
                source.catchUp(copy, until: cutoff)
                copy.takeDesignDocuments(from: source)
            }
        }
        return DatabaseHandle(copy)
    }
}

extension CouchEngine {
    /// The node name of an engine with no host (`_shards`).
    static let singleNodeName = "nonode@nohost"

    /// A database by name, for a host.
    package func handle(ofDatabase name: String) -> DatabaseHandle? { database(named: name).map(DatabaseHandle.init) }

    /// The names of the databases, in `_all_dbs` order.
    package var databaseNames: [String] { allDatabaseNames() }

    /// The quorum of `n` copies (CouchDB's default `w` and `r`).
    package static func quorum(_ n: Int) -> Int { max(n, 1) / 2 + 1 }

    /// Checks with the host that the documents `ids` can be written (before anything is written).
    func requireWritableCopies(_ db: Database, ids: [String]) throws(EngineError) {
        try host?.willWrite(DatabaseHandle(db), ids: ids)
    }

    /// The status of a committed write of `ids`: 201, or 202 Accepted (written, not yet durable) as the host says.
    func writeStatus(_ ctx: RequestContext, _ db: Database, ids: [String]) throws(EngineError) -> Int {
        guard let host else { return 201 }
        return try host.writeStatus(DatabaseHandle(db), ids: ids, request: ctx.request)
    }

    /// The database a secondary read is served from (the host's lagging copy, if any).
    func secondary(_ db: Database) -> Database {
        guard let host else { return db }
        return host.readCopy(of: DatabaseHandle(db)).database
    }
}
